#!/usr/bin/env bash
# Regenerates the seed corpora in fuzz/corpus/ from the test inputs, with
# the tools of a normal build (default build/bin). Each seed is small; the
# fuzzer grows its own corpus from them (scripts/fuzz.sh keeps that apart).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$root/build/bin}"
py="${MERAK_PYTHON:-/usr/bin/python3}"
out="$root/fuzz/corpus"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Inputs that once crashed a target (regression-*) stay.
mkdir -p "$out"
find "$out" -type f ! -name 'regression-*' -delete
mkdir -p "$out"/{fuzz-safetensors,fuzz-rank-program,fuzz-tokens,fuzz-mlir,fuzz-torchscript}

# A TorchScript module (nn.Linear(4, 1)), two batches and a checkpoint of
# one SGD step: weights, momentum and metadata.
linreg="$root/test/Runtime/linear-regression.mlir"
"$py" "$root/test/Runtime/Inputs/make_linreg.py" "$tmp" --steps 2 >/dev/null
"$bin/merak-exec" "$linreg" --init "$tmp/model.pt" --data "$tmp/batches.safetensors" \
  --steps 1 --lr 0.1 --threads 1 --save "$tmp/ckpt.safetensors" >/dev/null
cp "$tmp/batches.safetensors" "$out/fuzz-safetensors/batches.safetensors"
cp "$tmp/ckpt.safetensors" "$out/fuzz-safetensors/checkpoint.safetensors"
cp "$tmp/model.pt" "$out/fuzz-torchscript/linear.pt"

# Safetensors of every dtype the runtime holds, and sharded-checkpoint
# indexes of the shard files SafetensorsFuzzer.cpp writes (`w` split in
# rows over two files, `b` whole in the first).
"$py" - "$out" <<'PY'
import json, struct, sys
out = sys.argv[1] + "/"

def safetensors(path, tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)

safetensors(out + "fuzz-safetensors/dtypes.safetensors", {
    "f16": ("F16", [2], bytes(4)), "bf16": ("BF16", [2, 1], bytes(4)),
    "f32": ("F32", [3], bytes(12)), "f64": ("F64", [1], bytes(8)),
    "b": ("BOOL", [2], b"\x00\x01"), "i32": ("I32", [1, 1], bytes(4)),
    "i64": ("I64", [], bytes(8)), "empty": ("F32", [0, 4], b"")},
    {"step": "3"})

def index(name, tensors, files=("ck.s.rank0", "ck.s.rank1")):
    with open(out + "fuzz-safetensors/" + name, "w") as f:
        json.dump({"format": "merak-sharded-checkpoint-v1",
                   "metadata": {"checkpoint_id": "s", "step": "1"},
                   "mesh": {"shape": [2], "axes": ["dp"]},
                   "files": list(files), "tensors": tensors}, f)

row = lambda r: {"file": "ck.s.rank%d" % r, "offsets": [r, 0], "shape": [1, 3]}
index("index-sharded.json", {
    "w": {"dtype": "F32", "shape": [2, 3], "sharding": [["dp"], []],
          "blocks": [row(0), row(1)]},
    "b": {"dtype": "F32", "shape": [3], "sharding": [[]],
          "blocks": [{"file": "ck.s.rank0", "offsets": [0], "shape": [3]}]}})
index("index-stored-shape.json", {
    "w": {"dtype": "F32", "shape": [2, 3], "stored_shape": [6],
          "sharding": [["dp"], []], "blocks": [row(0), row(1)]}})
PY

# Rank programs: a step, a step with token inputs, a data-parallel step
# and a two-stage pipeline (1F1B) of the 8-layer MLP.
mlp8="$root/test/Dialect/Merak/Pipeline/Inputs/mlp8.mlir"
"$bin/merak-translate" "$linreg" --merak-to-rank-program -o "$out/fuzz-rank-program/linreg.mrp"
"$bin/merak-translate" "$root/test/Runtime/tokens.mlir" --merak-to-rank-program \
  -o "$out/fuzz-rank-program/tokens.mrp"
"$bin/merak-opt" "$linreg" --merak-parallelize="dp=2" -o "$tmp/dp.mlir"
"$bin/merak-translate" "$tmp/dp.mlir" --merak-to-rank-program -o "$out/fuzz-rank-program/linreg-dp2.mrp"
"$bin/merak-opt" "$mlp8" --merak-train="optimizer=sgd lr=0.1" \
  --merak-parallelize="pp=2 microbatches=2 schedule=1f1b" -o "$tmp/pp.mlir"
"$bin/merak-translate" "$tmp/pp.mlir" --merak-to-rank-program -o "$out/fuzz-rank-program/mlp8-pp2.mrp"

# Token files: four bytes of settings (see TokensFuzzer.cpp), then tokens.
"$py" - "$out/fuzz-tokens" <<'PY'
import struct, sys
out = sys.argv[1] + "/"
open(out + "u16-two-inputs", "wb").write(
    bytes([2, 1, 8, 4]) + struct.pack("<40H", *range(40)))
open(out + "i32-one-input", "wb").write(
    bytes([1 | 4, 3, 5, 0]) + struct.pack("<24i", *range(-12, 12)))
open(out + "u16-exact", "wb").write(
    bytes([2, 0, 3, 9]) + struct.pack("<4H", 65535, 0, 1, 2))
PY

# MLIR: the runtime tests' hand-written steps, the pipeline MLP and the
# op round-trip tests, each split as -split-input-file splits them.
cp "$linreg" "$root/test/Runtime/tokens.mlir" "$mlp8" "$out/fuzz-mlir/"
cp "$tmp/dp.mlir" "$out/fuzz-mlir/linreg-dp2.mlir"
for f in ops-elementwise ops-nn ops-shape ops-training; do
  awk -v out="$out/fuzz-mlir/$f" '
    BEGIN { n = 0; file = sprintf("%s-%02d.mlir", out, n) }
    /^\/\/ -----/ { close(file); n++; file = sprintf("%s-%02d.mlir", out, n); next }
    { print > file }' "$root/test/Dialect/Merak/IR/$f.mlir"
done

# TorchScript: a small traced MLP with a loss, as merak_trace saves models
# (with merak/inputs.json), besides the scripted linear module above.
PYTHONPATH="$root/python" "$py" - "$out/fuzz-torchscript/mlp.pt" <<'PY'
import sys, torch, merak_trace
torch.manual_seed(0)
class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 3)
    def forward(self, x, y):
        h = torch.nn.functional.gelu(self.fc1(x))
        return torch.nn.functional.cross_entropy(self.fc2(h), y)
merak_trace.save(MLP(), (torch.randn(2, 4), torch.tensor([0, 2])), sys.argv[1])
PY
