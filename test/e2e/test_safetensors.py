"""Tests python/merak_safetensors.py: layout, round trips, broken files."""

import json
import os
import struct
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import merak_safetensors as st  # noqa: E402


def sample(dtype, shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=gen,
                         dtype=torch.int64).to(dtype)


class Layout(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.safetensors")

    def tearDown(self):
        self.dir.cleanup()

    def test_spec_example_bytes(self):
        # Two tensors written by hand from the format description.
        st.save({"b": torch.tensor([1, 2], dtype=torch.int32),
                 "a": torch.tensor([[1.5]], dtype=torch.float32)},
                self.path, {"k": "v"})
        header = ('{"__metadata__":{"k":"v"},'
                  '"a":{"dtype":"F32","shape":[1,1],"data_offsets":[0,4]},'
                  '"b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}}')
        header = header.encode() + b" " * (-len(header) % 8)
        want = (struct.pack("<Q", len(header)) + header
                + struct.pack("<f", 1.5) + struct.pack("<ii", 1, 2))
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), want)

    def test_header_padded_and_sorted(self):
        tensors = {"zeta": torch.zeros(3), "alpha": torch.ones(2, 2),
                   "mid": torch.arange(5)}
        st.save(tensors, self.path)
        with open(self.path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            raw = f.read(n)
        self.assertEqual(n % 8, 0)
        header = json.loads(raw)
        self.assertNotIn("__metadata__", header)
        names = list(header)
        self.assertEqual(names, sorted(names))
        self.assertEqual([header[k]["data_offsets"][0] for k in names],
                         [0, 16, 56])

    def test_independent_reader(self):
        # Decode with numpy only, so the writer is not checked by itself.
        t = torch.arange(12, dtype=torch.float64).reshape(3, 4).t()
        st.save({"x": t}, self.path)
        with open(self.path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        entry = json.loads(data[8:8 + n])["x"]
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[8 + n + begin:8 + n + end], "<f8")
        np.testing.assert_array_equal(array.reshape(entry["shape"]),
                                      t.numpy())


class RoundTrip(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.safetensors")

    def tearDown(self):
        self.dir.cleanup()

    def test_every_dtype(self):
        tensors = {}
        for i, (name, (dtype, _)) in enumerate(sorted(st.DTYPES.items())):
            tensors[name + "_2d"] = sample(dtype, (3, 5), seed=i)
            tensors[name + "_scalar"] = sample(dtype, (), seed=i)
            tensors[name + "_empty"] = sample(dtype, (0, 4), seed=i)
            # Non-contiguous input must be stored in logical order.
            tensors[name + "_strided"] = sample(dtype, (4, 6),
                                               seed=i)[::2, 1::2]
        st.save(tensors, self.path, {"a": "1", "b": "é"})
        loaded, metadata = st.load(self.path)
        self.assertEqual(metadata, {"a": "1", "b": "é"})
        self.assertEqual(set(loaded), set(tensors))
        for name, t in tensors.items():
            got = loaded[name]
            self.assertEqual(got.dtype, t.dtype, name)
            self.assertEqual(got.shape, t.shape, name)
            self.assertTrue(got.is_contiguous(), name)
            self.assertTrue(torch.equal(got, t), name)
        dtypes = {entry[0] for entry in st.read_header(self.path)[0].values()}
        self.assertEqual(dtypes, set(st.DTYPES))

    def test_float_bits_preserved(self):
        special = [0.0, -0.0, float("inf"), float("-inf"), float("nan"),
                   1e-40, 65504.0, 3.3895e38]
        for dtype in (torch.float16, torch.bfloat16, torch.float32,
                      torch.float64):
            t = torch.tensor(special, dtype=torch.float64).to(dtype)
            st.save({"x": t}, self.path)
            got = st.load(self.path)[0]["x"]
            bits = torch.int16 if t.element_size() == 2 else (
                torch.int32 if t.element_size() == 4 else torch.int64)
            self.assertTrue(torch.equal(got.view(bits), t.view(bits)), dtype)

    def test_requires_grad_and_no_metadata(self):
        w = torch.randn(4, requires_grad=True)
        st.save({"w": w}, self.path)
        loaded, metadata = st.load(self.path)
        self.assertIsNone(metadata)
        self.assertFalse(loaded["w"].requires_grad)
        self.assertTrue(torch.equal(loaded["w"], w.detach()))

    def test_loaded_tensors_are_writable(self):
        st.save({"x": torch.zeros(3)}, self.path)
        x = st.load(self.path)[0]["x"]
        x += 1
        self.assertTrue(torch.equal(x, torch.ones(3)))

    def test_replaces_atomically(self):
        st.save({"x": torch.zeros(3)}, self.path)
        with self.assertRaises(st.SafetensorsError):
            st.save({"x": torch.zeros(2, dtype=torch.complex64)}, self.path)
        # The old file survives a failed save, and no temporary is left.
        self.assertEqual(st.load(self.path)[0]["x"].shape, (3,))
        # Also when the failure comes half way through the data.
        calls = []

        def failing(tensor):
            calls.append(1)
            if len(calls) == 2:
                raise OSError("disk full")
            return original(tensor)
        original, st._to_bytes = st._to_bytes, failing
        try:
            with self.assertRaisesRegex(OSError, "disk full"):
                st.save({"x": torch.ones(5), "y": torch.ones(5)}, self.path)
        finally:
            st._to_bytes = original
        self.assertEqual(st.load(self.path)[0]["x"].shape, (3,))
        self.assertEqual(os.listdir(self.dir.name), ["t.safetensors"])
        mode = os.stat(self.path).st_mode & 0o777
        self.assertEqual(mode, 0o666 & ~st._umask())


class Errors(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.safetensors")
        st.save({"a": torch.arange(4, dtype=torch.int32),
                 "b": torch.ones(2, dtype=torch.float64)}, self.path)
        with open(self.path, "rb") as f:
            self.good = f.read()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, data):
        with open(self.path, "wb") as f:
            f.write(data)

    def raw(self, header, data=b""):
        text = json.dumps(header).encode()
        return struct.pack("<Q", len(text)) + text + data

    def assertLoadFails(self, pattern):
        with self.assertRaisesRegex(st.SafetensorsError, pattern):
            st.load(self.path)

    def test_truncated_data(self):
        self.write(self.good[:-3])
        self.assertLoadFails("truncated: the header describes 32 bytes of "
                             "tensor data but the file holds 29")

    def test_truncated_header(self):
        self.write(self.good[:20])
        self.assertLoadFails("truncated: the header is")

    def test_truncated_length(self):
        self.write(self.good[:5])
        self.assertLoadFails("truncated: 5 bytes")

    def test_empty_file(self):
        self.write(b"")
        self.assertLoadFails("truncated: 0 bytes")

    def test_trailing_bytes(self):
        self.write(self.good + b"\0")
        self.assertLoadFails("1 bytes of trailing data")

    def test_huge_header_length(self):
        self.write(struct.pack("<Q", 1 << 60) + b"{}")
        self.assertLoadFails("header length")

    def test_bad_json(self):
        self.write(struct.pack("<Q", 3) + b"{x}")
        self.assertLoadFails("not valid JSON")

    def test_duplicate_key(self):
        text = (b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}')
        self.write(struct.pack("<Q", len(text)) + text + b"\0")
        self.assertLoadFails("duplicate key 'a'")

    def test_gap(self):
        self.write(self.raw({"a": {"dtype": "U8", "shape": [1],
                                   "data_offsets": [1, 2]}}, b"\0\0"))
        self.assertLoadFails("starts at byte 1, expected 0")

    def test_size_mismatch(self):
        self.write(self.raw({"a": {"dtype": "F32", "shape": [2],
                                   "data_offsets": [0, 4]}}, b"\0" * 4))
        self.assertLoadFails("8 bytes, but data_offsets")

    def test_unknown_and_unsupported_dtype(self):
        self.write(self.raw({"a": {"dtype": "F7", "shape": [1],
                                   "data_offsets": [0, 1]}}, b"\0"))
        self.assertLoadFails("unknown dtype 'F7'")
        self.write(self.raw({"a": {"dtype": "U16", "shape": [1],
                                   "data_offsets": [0, 2]}}, b"\0\0"))
        self.assertLoadFails("U16, which torch")

    def test_bad_metadata(self):
        self.write(self.raw({"__metadata__": {"a": 1}}))
        self.assertLoadFails("must map str to str")

    def test_save_rejects(self):
        with self.assertRaisesRegex(st.SafetensorsError, "reserved"):
            st.save({"__metadata__": torch.zeros(1)}, self.path)
        with self.assertRaisesRegex(st.SafetensorsError, "not a torch.Tensor"):
            st.save({"a": np.zeros(1)}, self.path)
        with self.assertRaisesRegex(st.SafetensorsError, "str to str"):
            st.save({"a": torch.zeros(1)}, self.path, {"k": 1})


if __name__ == "__main__":
    unittest.main()
