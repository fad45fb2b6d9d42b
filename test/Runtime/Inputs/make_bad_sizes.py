"""Writes the files of bad-sizes.test: tensors whose sizes do not add up.

Usage: make_bad_sizes.py OUT_DIR (next to make_linreg.py's model.pt)

- overflow_weights.safetensors, overflow_batches.safetensors: a tensor of
  shape [2^60, ...] with data_offsets [0, 0], whose byte size overflows 64
  bits (to 0, which the offsets then match);
- huge_dim.safetensors: a dimension of 2^63, beyond a signed 64-bit size;
- short_storage.pt: model.pt with the storage record of fc.weight cut to
  half of the tensor's bytes (the pickle still declares the full size).
"""

import json
import os
import struct
import sys
import zipfile


def write_safetensors(path, header, data=b""):
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    out = sys.argv[1]
    big = 2 ** 60
    write_safetensors(
        os.path.join(out, "overflow_weights.safetensors"),
        {"fc.weight": {"dtype": "F32", "shape": [big, 2, 16],
                       "data_offsets": [0, 0]},
         "fc.bias": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
        b"\0" * 4)
    write_safetensors(
        os.path.join(out, "overflow_batches.safetensors"),
        {"x": {"dtype": "F32", "shape": [big, 8, 4], "data_offsets": [0, 0]},
         "y": {"dtype": "F32", "shape": [big, 8, 1], "data_offsets": [0, 0]}})
    write_safetensors(
        os.path.join(out, "huge_dim.safetensors"),
        {"x": {"dtype": "F32", "shape": [2 ** 63, 8, 4],
               "data_offsets": [0, 0]}})

    # The first storage record (fc.weight, 1x4 f32) keeps 8 of its 16 bytes.
    with zipfile.ZipFile(os.path.join(out, "model.pt")) as src, \
            zipfile.ZipFile(os.path.join(out, "short_storage.pt"), "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("/data/0"):
                data = data[: len(data) // 2]
            dst.writestr(info, data)


if __name__ == "__main__":
    main()
