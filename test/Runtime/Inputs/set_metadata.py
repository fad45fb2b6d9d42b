"""Copies a checkpoint with some of its metadata fields replaced.

Usage: set_metadata.py IN OUT KEY=VALUE...

IN and OUT are safetensors files (the header is rewritten, the data copied
as it is), or sharded checkpoints' indexes (`*.index.json`, whose shard
files OUT then shares with IN).
"""

import json
import struct
import sys


def rewrite(src, dst, changes):
    """Copies `src` to `dst` with `changes` (a dict) in its metadata."""
    if src.endswith(".index.json"):
        with open(src) as f:
            index = json.load(f)
        index["metadata"].update(changes)
        with open(dst, "w") as f:
            json.dump(index, f)
        return
    with open(src, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    header.setdefault("__metadata__", {}).update(changes)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + raw[8 + length:])


def main():
    rewrite(sys.argv[1], sys.argv[2],
            dict(arg.split("=", 1) for arg in sys.argv[3:]))


if __name__ == "__main__":
    main()
