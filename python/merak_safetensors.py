"""Reads and writes safetensors files without the safetensors package."""

import json
import os
import struct
import sys
import tempfile

import numpy as np
import torch

__all__ = ["SafetensorsError", "DTYPES", "save", "load", "read_header"]


class SafetensorsError(ValueError):
    """An invalid safetensors file, or a tensor it cannot store."""


# safetensors dtype name -> (torch dtype, little-endian numpy dtype used for
# the bytes). bfloat16 has no numpy type, so its bits travel as int16.
DTYPES = {
    "BOOL": (torch.bool, np.dtype("|b1")),
    "U8": (torch.uint8, np.dtype("|u1")),
    "I8": (torch.int8, np.dtype("|i1")),
    "I16": (torch.int16, np.dtype("<i2")),
    "I32": (torch.int32, np.dtype("<i4")),
    "I64": (torch.int64, np.dtype("<i8")),
    "F16": (torch.float16, np.dtype("<f2")),
    "BF16": (torch.bfloat16, np.dtype("<i2")),
    "F32": (torch.float32, np.dtype("<f4")),
    "F64": (torch.float64, np.dtype("<f8")),
}
_NAME_OF = {torch_dtype: name for name, (torch_dtype, _) in DTYPES.items()}

# Types the format defines but torch 1.13 cannot hold.
_UNSUPPORTED = {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2"}

METADATA_KEY = "__metadata__"
# The reference implementation refuses headers above 100 MB; so do we, so a
# corrupt length cannot make us allocate gigabytes.
MAX_HEADER = 100_000_000


def _to_bytes(tensor):
    """Contiguous little-endian bytes of ``tensor``."""
    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    array = t.numpy()
    # torch tensors are in native order; the format is little-endian.
    if sys.byteorder == "big" and array.dtype.itemsize > 1:
        array = array.byteswap()
    return array.tobytes()


def _header(tensors, metadata):
    header = {}
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str)
                for k, v in metadata.items()):
            raise SafetensorsError("metadata must map str to str")
        header[METADATA_KEY] = dict(metadata)
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _NAME_OF[t.dtype],
                        "shape": [int(d) for d in t.shape],
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    raw = text.encode("utf-8")
    # Padding to 8 keeps the data start aligned for readers that map the file.
    raw += b" " * (-len(raw) % 8)
    return raw


def save(tensors, path, metadata=None):
    """Writes ``tensors`` (name -> torch.Tensor) to ``path`` atomically.

    Tensors are laid out in sorted-name order; ``metadata`` (str -> str)
    goes to the ``__metadata__`` header entry.
    """
    for name, t in tensors.items():
        if not isinstance(name, str) or not name:
            raise SafetensorsError("tensor names must be non-empty strings, "
                                   "got %r" % (name,))
        if name == METADATA_KEY:
            raise SafetensorsError("%r is reserved for metadata" % name)
        if not isinstance(t, torch.Tensor):
            raise SafetensorsError("%r is a %s, not a torch.Tensor"
                                   % (name, type(t).__name__))
        if t.dtype not in _NAME_OF:
            raise SafetensorsError("%r has dtype %s, which safetensors "
                                   "cannot store" % (name, t.dtype))
        if t.is_sparse:
            raise SafetensorsError("%r is sparse; store it dense" % name)
    header = _header(tensors, metadata)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    # A temporary file in the same directory, so os.replace is a rename and
    # readers never see a half-written file.
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path),
                               suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(header)))
            f.write(header)
            for name in sorted(tensors):
                f.write(_to_bytes(tensors[name]))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _no_duplicates(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise SafetensorsError("duplicate key %r in header" % key)
        result[key] = value
    return result


def _parse_header(raw, path):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorsError("%s: header is not UTF-8: %s" % (path, e))
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise SafetensorsError("%s: header is not valid JSON: %s" % (path, e))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % path)
    metadata = header.pop(METADATA_KEY, None)
    if metadata is not None and not (
            isinstance(metadata, dict) and all(
                isinstance(k, str) and isinstance(v, str)
                for k, v in metadata.items())):
        raise SafetensorsError("%s: %s must map str to str"
                               % (path, METADATA_KEY))
    return header, metadata


def _check_entry(name, entry, path):
    """Validates one tensor entry; returns (dtype name, shape, begin, end)."""
    if not isinstance(entry, dict):
        raise SafetensorsError("%s: entry %r is not an object" % (path, name))
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if dtype in _UNSUPPORTED:
        raise SafetensorsError("%s: tensor %r has dtype %s, which torch %s "
                               "cannot hold" % (path, name, dtype,
                                                torch.__version__))
    if dtype not in DTYPES:
        raise SafetensorsError("%s: tensor %r has unknown dtype %r"
                               % (path, name, dtype))
    if not isinstance(shape, list) or not all(
            type(d) is int and d >= 0 for d in shape):
        raise SafetensorsError("%s: tensor %r has invalid shape %r"
                               % (path, name, shape))
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(
            type(o) is int and o >= 0 for o in offsets)
            and offsets[0] <= offsets[1]):
        raise SafetensorsError("%s: tensor %r has invalid data_offsets %r"
                               % (path, name, offsets))
    numel = 1
    for d in shape:
        numel *= d
    begin, end = offsets
    expected = numel * DTYPES[dtype][1].itemsize
    if end - begin != expected:
        raise SafetensorsError(
            "%s: tensor %r is %s %s, %d bytes, but data_offsets %r span %d"
            % (path, name, dtype, shape, expected, offsets, end - begin))
    return dtype, shape, begin, end


def read_header(path):
    """Returns (entries, metadata, data_start, file_size) after validating.

    ``entries`` maps name -> (dtype name, shape, begin, end), offsets
    relative to ``data_start``.
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise SafetensorsError(
                "%s: truncated: %d bytes, too short for the 8-byte header "
                "length" % (path, len(prefix)))
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER:
            raise SafetensorsError("%s: header length %d is larger than %d; "
                                   "not a safetensors file?"
                                   % (path, length, MAX_HEADER))
        if 8 + length > size:
            raise SafetensorsError(
                "%s: truncated: the header is %d bytes but only %d follow "
                "the length" % (path, length, size - 8))
        raw = f.read(length)
    header, metadata = _parse_header(raw, path)
    entries = {name: _check_entry(name, entry, path)
               for name, entry in header.items()}
    data_start = 8 + length
    data_size = size - data_start
    # The data must be covered exactly once, without gaps or overlaps.
    position = 0
    for name, (_, _, begin, end) in sorted(entries.items(),
                                           key=lambda kv: kv[1][2:]):
        if begin != position:
            raise SafetensorsError(
                "%s: tensor %r starts at byte %d, expected %d (gap or "
                "overlap in data_offsets)" % (path, name, begin, position))
        position = end
    if position > data_size:
        raise SafetensorsError(
            "%s: truncated: the header describes %d bytes of tensor data "
            "but the file holds %d" % (path, position, data_size))
    if position < data_size:
        raise SafetensorsError(
            "%s: %d bytes of trailing data after the last tensor"
            % (path, data_size - position))
    return entries, metadata, data_start, size


def load(path):
    """Returns ({name: torch.Tensor}, metadata dict or None) from ``path``."""
    path = os.fspath(path)
    entries, metadata, data_start, _ = read_header(path)
    tensors = {}
    with open(path, "rb") as f:
        for name in sorted(entries, key=lambda n: entries[n][2]):
            dtype, shape, begin, end = entries[name]
            torch_dtype, np_dtype = DTYPES[dtype]
            f.seek(data_start + begin)
            raw = f.read(end - begin)
            if len(raw) != end - begin:
                raise SafetensorsError("%s: truncated while reading %r"
                                       % (path, name))
            # A fresh native-order array: aligned and writable, whatever the
            # tensor's offset in the file.
            array = np.frombuffer(raw, dtype=np_dtype).astype(
                np_dtype.newbyteorder("="), copy=True).reshape(shape)
            t = torch.from_numpy(array)
            if torch_dtype == torch.bfloat16:
                t = t.view(torch.bfloat16)
            tensors[name] = t
    return tensors, metadata
