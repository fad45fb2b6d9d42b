"""Leaves beside a sharded checkpoint what a save killed midway leaves.

Usage: leave_killed_save.py DIR NAME

DIR/NAME.index.json is a complete sharded checkpoint of two ranks. This adds
what a later save (id fedcba9876543210) killed before its index would
leave: rank 0's shard file half written under its temporary name, rank 1's
complete, and the index's temporary. It also adds files that only look
like a save's, which must stay: one under a shard name that holds no
checkpoint, and a copy of a shard file under another save's id.
"""

import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import set_metadata  # noqa: E402

KILLED = "fedcba9876543210"


def main():
    out, name = sys.argv[1], sys.argv[2]
    with open(os.path.join(out, name + ".index.json")) as f:
        files = json.load(f)["files"]
    rank0, rank1 = (os.path.join(out, f) for f in files)
    with open(rank0, "rb") as f:
        half = f.read()
    with open(os.path.join(out, ".%s.%s.rank0.Xy12Zz" % (name, KILLED)),
              "wb") as f:
        f.write(half[: len(half) // 2])
    set_metadata.rewrite(rank1, os.path.join(
        out, "%s.%s.rank1" % (name, KILLED)), {"checkpoint_id": KILLED})
    with open(os.path.join(out, ".%s.index.json.Qw34Er" % name), "w") as f:
        f.write("{")
    with open(os.path.join(out, "%s.0000000000000aaa.rank3" % name),
              "w") as f:
        f.write("not a checkpoint")
    shutil.copy(rank0, os.path.join(out, "%s.00000000000000cc.rank0" % name))


if __name__ == "__main__":
    main()
