"""Fault tests of training runs: a job killed at random moments and resumed
(soak), saves killed at chosen byte offsets, and saves into a full disk.

Usage:
    faults.py soak --seed S --steps N --every E --kills K --dir W -- CMD...
    faults.py kill-in-save --dir W --every E [--ranks R] -- CMD...
    faults.py full-disk --dir W --every E -- CMD...

CMD is a merak-exec command line (program, --nproc, --init, data,
--threads) without --steps, --save-dir, --save-every, --keep-last or
--log-jsonl, which each mode adds. Every mode first runs CMD without a
fault as the reference (its losses and final checkpoint), then checks that
what the faults leave behind gives exactly the reference again: every loss
logged by any run bit for bit the reference's at that step, and the final
checkpoint's tensors byte for byte the reference's. It prints one summary
line per mode and exits non-zero, naming the case, on the first mismatch.
"""

import argparse
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import time

STEP_FILE = re.compile(r"^step-(\d{8,})\.safetensors(\.index\.json)?$")


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def run(cmd, timeout=300, env=None, preexec=None):
    """Runs cmd to the end; returns (exit status, output)."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout, env=env, preexec_fn=preexec,
                          start_new_session=True)
    return proc.returncode, proc.stdout.decode(errors="replace")


def losses(path):
    """step -> list of the loss texts logged for it (every run's)."""
    found = {}
    if not os.path.exists(path):
        return found
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                # A rank-0 kill can only cut the last line of a run short.
                continue
            found.setdefault(record["step"], []).append(repr(record["loss"]))
    return found


def read_tensors(path):
    """name -> (dtype, shape, bytes) of a safetensors file, and metadata."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        out[name] = (entry["dtype"], tuple(entry["shape"]),
                     data[base + begin:base + end])
    return out, meta


def checkpoint_state(path):
    """The tensors of a checkpoint: one file, or every shard file its index
    lists (by rank), with the counters of its metadata."""
    index = path + ".index.json"
    if os.path.exists(path):
        tensors, meta = read_tensors(path)
        return {"whole": tensors}, counters(meta)
    with open(index) as f:
        listed = json.load(f)["files"]
    state, meta = {}, {}
    for name in listed:
        tensors, meta = read_tensors(os.path.join(os.path.dirname(path), name))
        state[name.rsplit(".", 1)[1]] = tensors
    return state, counters(meta)


def counters(meta):
    return {k: meta.get(k) for k in ("step", "optimizer_step", "seed")}


def committed(directory):
    """step -> checkpoint path of the committed checkpoints in directory."""
    found = {}
    for name in os.listdir(directory):
        m = STEP_FILE.match(name)
        if m:
            found[int(m.group(1))] = os.path.join(
                directory, "step-%s.safetensors" % m.group(1))
    return found


def leftovers(directory):
    """Files of directory that are neither a committed checkpoint nor a
    shard file its index lists."""
    keep = set()
    for path in committed(directory).values():
        if os.path.exists(path):
            keep.add(os.path.basename(path))
        else:
            keep.add(os.path.basename(path) + ".index.json")
            with open(path + ".index.json") as f:
                keep.update(json.load(f)["files"])
    return sorted(set(os.listdir(directory)) - keep)


class Reference:
    def __init__(self, cmd, steps, workdir):
        self.dir = os.path.join(workdir, "reference")
        os.makedirs(self.dir, exist_ok=True)
        log = os.path.join(workdir, "reference.jsonl")
        if os.path.exists(log):
            os.remove(log)
        start = time.monotonic()
        status, out = run(cmd + ["--steps", str(steps), "--save-dir", self.dir,
                                 "--log-jsonl", log])
        self.seconds = time.monotonic() - start
        if status != 0:
            fail("the reference run failed (%d):\n%s" % (status, out))
        self.losses = {step: texts[0] for step, texts in losses(log).items()}
        if sorted(self.losses) != list(range(1, steps + 1)):
            fail("the reference run logged steps %s" % sorted(self.losses))
        self.final = checkpoint_state(committed(self.dir)[steps])
        # The start-up: a run of one step, from the same state.
        start = time.monotonic()
        status, out = run(cmd + ["--steps", "1"])
        self.startup = min(time.monotonic() - start, self.seconds)
        if status != 0:
            fail("a run of one step failed (%d):\n%s" % (status, out))
        self.step_seconds = (self.seconds - self.startup) / steps

    def check_losses(self, log, case, steps=None):
        """Every loss in log is the reference's; returns how many."""
        count = 0
        for step, texts in sorted(losses(log).items()):
            for text in texts:
                if text != self.losses.get(step):
                    fail("%s: step %d logged loss %s, the uninterrupted run %s"
                         % (case, step, text, self.losses.get(step)))
                count += 1
        if steps is not None:
            missing = [s for s in range(1, steps + 1) if s not in losses(log)]
            if missing:
                fail("%s: steps %s were never logged" % (case, missing))
        return count

    def check_final(self, directory, steps, case):
        found = committed(directory)
        if steps not in found:
            fail("%s: no checkpoint of step %d in %s (%s)"
                 % (case, steps, directory, sorted(found)))
        state = checkpoint_state(found[steps])
        if state[1] != self.final[1]:
            fail("%s: final counters %s, the uninterrupted run's %s"
                 % (case, state[1], self.final[1]))
        if state[0] != self.final[0]:
            fail("%s: the final checkpoint's tensors differ from the "
                 "uninterrupted run's" % case)


def rank_pids(launcher):
    """The rank processes merak-exec --nproc started (its children)."""
    try:
        with open("/proc/%d/task/%d/children" % (launcher, launcher)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def soak(args, cmd):
    ref = Reference(cmd, args.steps, args.dir)
    rng = random.Random(args.seed)
    work = os.path.join(args.dir, "soak")
    log = os.path.join(args.dir, "soak.jsonl")
    os.makedirs(work, exist_ok=True)
    run_cmd = cmd + ["--steps", str(args.steps), "--save-dir", work,
                     "--save-every", str(args.every), "--keep-last", "3",
                     "--log-jsonl", log]
    kills = {"job": 0, "rank": 0, "finished": 0}
    bound = args.timeout
    for k in range(args.kills):
        # One kill in five during the start-up (reading the program and
        # the checkpoint, the rendezvous); the others once the log reaches
        # a random step after the newest checkpoint, a random part of a
        # step later (inside a step, a collective or a save).
        done = max(committed(work), default=0)
        if done >= args.steps:
            # A kill landed after the last step's checkpoint was committed
            # but before the launcher exited: nothing is left to interrupt.
            break
        logged = len(open(log).readlines()) if os.path.exists(log) else 0
        startup = rng.random() < 0.2
        how = rng.choice(["job", "rank"])
        target = rng.randint(done + 1, args.steps)
        delay = rng.uniform(0.0, ref.startup if startup else ref.step_seconds)
        proc = subprocess.Popen(run_cmd, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                                start_new_session=True)
        if not startup:
            # Each record of this run is one step from `done + 1` on.
            while proc.poll() is None:
                now = len(open(log).readlines()) if os.path.exists(log) else 0
                if now - logged >= target - done:
                    break
                time.sleep(0.002)
        try:
            proc.wait(timeout=delay)
            kills["finished"] += 1
            if proc.returncode != 0:
                fail("soak run %d (seed %d) failed without a fault (%d)"
                     % (k, args.seed, proc.returncode))
            break
        except subprocess.TimeoutExpired:
            pass
        ranks = rank_pids(proc.pid)
        if how == "rank" and ranks:
            os.kill(rng.choice(ranks), signal.SIGKILL)
        else:
            how = "job"
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            status = proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            fail("soak kill %d (seed %d, %s after %.2f s): the launcher was "
                 "still running %d s later" % (k, args.seed, how, delay,
                                               bound))
        # What the launcher left: nothing may outlive it.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if status == 0:
            # The kill landed after the run ended.
            kills["finished"] += 1
            break
        kills[how] += 1
    status, out = run(run_cmd)
    if status != 0:
        fail("the soak's last run (seed %d) failed (%d):\n%s"
             % (args.seed, status, out))
    records = ref.check_losses(log, "soak (seed %d)" % args.seed, args.steps)
    ref.check_final(work, args.steps, "soak (seed %d)" % args.seed)
    left = leftovers(work)
    if left:
        fail("soak: files left in %s: %s" % (work, left))
    kept = sorted(committed(work))
    if len(kept) != 3:
        fail("soak: --keep-last 3 kept %s" % kept)
    print("soak: seed %d, %d steps, checkpoint every %d; %d job kills, %d "
          "rank kills, %d runs in all; %d logged losses identical to the "
          "uninterrupted run's, final state identical; kept steps %s"
          % (args.seed, args.steps, args.every, kills["job"], kills["rank"],
             kills["job"] + kills["rank"] + 1, records, kept))


def save_sizes(ref_dir, every, rank):
    """Bytes the periodic save of step `every` writes on `rank` (its shard
    file, plus the index on rank 0)."""
    path = committed(ref_dir).get(every)
    if path is None:
        fail("the reference saved no checkpoint at step %d" % every)
    if os.path.exists(path):
        return os.path.getsize(path)
    index = path + ".index.json"
    with open(index) as f:
        files = json.load(f)["files"]
    mine = [f for f in files if f.endswith(".rank%d" % rank)][0]
    size = os.path.getsize(os.path.join(ref_dir, mine))
    return size + (os.path.getsize(index) if rank == 0 else 0)


def kill_in_save(args, cmd):
    """Kills a rank while it writes the second periodic save, at offsets
    across its shard (and rank 0's index); then the run is started again
    and must end as the uninterrupted one."""
    steps = 3 * args.every
    ref_every = os.path.join(args.dir, "reference-every")
    os.makedirs(ref_every, exist_ok=True)
    status, out = run(cmd + ["--steps", str(steps), "--save-dir", ref_every,
                             "--save-every", str(args.every)])
    if status != 0:
        fail("the reference with periodic saves failed:\n" + out)
    ref = Reference(cmd, steps, args.dir)
    cases = 0
    for rank in range(args.ranks):
        first = save_sizes(ref_every, args.every, rank)
        second = save_sizes(ref_every, 2 * args.every, rank)
        # Offsets into the second save: its start, the safetensors header,
        # inside the data, the last byte, and (rank 0) the index.
        offsets = sorted({0, 1, 7, 8, 64, second // 3, second // 2,
                          second - 1, second})
        if args.few:
            offsets = [0, second // 2, second - 1]
        for offset in offsets:
            case = "rank %d killed at byte %d of the save of step %d" % (
                rank, offset, 2 * args.every)
            work = os.path.join(args.dir, "kill-r%d-%d" % (rank, offset))
            os.makedirs(work, exist_ok=True)
            log = work + ".jsonl"
            run_cmd = cmd + ["--steps", str(steps), "--save-dir", work,
                             "--save-every", str(args.every), "--log-jsonl",
                             log]
            env = dict(os.environ)
            env["MERAK_FAULT_KILL_AFTER_BYTES"] = "%d@%d" % (first + offset,
                                                             rank)
            status, out = run(run_cmd, env=env)
            if status == 0:
                fail(case + ": the run was not killed")
            found = committed(work)
            newest = max(found) if found else 0
            if newest not in (args.every, 2 * args.every):
                fail("%s: newest committed checkpoint is of step %s"
                     % (case, newest))
            # The newest checkpoint is whole: the run resumes from it.
            status, out = run(run_cmd)
            if status != 0:
                fail("%s: the resumed run failed:\n%s" % (case, out))
            if "resuming from " + found[newest] not in out:
                fail("%s: did not resume from %s:\n%s"
                     % (case, found[newest], out))
            ref.check_losses(log, case, steps)
            ref.check_final(work, steps, case)
            left = leftovers(work)
            if left:
                fail("%s: files left: %s" % (case, left))
            cases += 1
    print("kill-in-save: %d kills inside a save (ranks 0-%d, offsets from "
          "the first byte to the last and the index); each time the previous "
          "checkpoint loaded, the run resumed to the uninterrupted run's "
          "losses and final state, and nothing was left behind"
          % (cases, args.ranks - 1))


def set_file_size_limit(limit):
    import resource

    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def full_disk(args, cmd):
    """A save that cannot be written (a file-size limit, and a full tmpfs
    where this user may mount one): a clear error, the previous checkpoint
    whole, and the run resumes to the uninterrupted run's end."""
    steps = 2 * args.every
    ref = Reference(cmd, steps, args.dir)
    size = max(os.path.getsize(os.path.join(ref.dir, f))
               for f in os.listdir(ref.dir))
    work = os.path.join(args.dir, "fsize")
    os.makedirs(work, exist_ok=True)
    log = work + ".jsonl"
    run_cmd = cmd + ["--save-dir", work, "--save-every", str(args.every),
                     "--log-jsonl", log]
    status, out = run(run_cmd + ["--steps", str(args.every)])
    if status != 0:
        fail("full disk: the first run failed:\n" + out)
    # Files may grow to half a checkpoint: the log still fits.
    status, out = run(run_cmd + ["--steps", str(steps)],
                      preexec=set_file_size_limit(size // 2))
    if status == 0 or "File too large" not in out or "--save-dir" not in out:
        fail("full disk (file-size limit): expected an error naming the "
             "save, got status %d:\n%s" % (status, out))
    message = [l for l in out.splitlines() if "error" in l][0]
    # No temporary is left; a rank whose shard fitted leaves it complete
    # (the next save removes it).
    if sorted(committed(work)) != [args.every] or any(
            name.startswith(".") for name in leftovers(work)):
        fail("full disk (file-size limit): left %s" % os.listdir(work))
    status, out = run(run_cmd + ["--steps", str(steps)])
    if status != 0:
        fail("full disk: the resumed run failed:\n" + out)
    ref.check_losses(log, "full disk (file-size limit)", steps)
    ref.check_final(work, steps, "full disk (file-size limit)")
    if leftovers(work):
        fail("full disk (file-size limit): the resumed run's saves left %s"
             % leftovers(work))
    print("full disk (file-size limit): " + message.strip())

    # A tmpfs a checkpoint and a half large: the second save runs out of
    # space. Mounting one needs a user and mount namespace.
    probe = subprocess.run(["unshare", "--user", "--map-root-user",
                            "--mount", "true"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    if probe.returncode != 0:
        print("full disk (tmpfs): not run, this user cannot create a mount "
              "namespace (unshare --user --map-root-user --mount)")
        return
    total = sum(os.path.getsize(os.path.join(ref.dir, f))
                for f in os.listdir(ref.dir))
    mount = os.path.join(args.dir, "tmpfs")
    os.makedirs(mount, exist_ok=True)
    work = os.path.join(mount, "ckpt")
    log = os.path.join(args.dir, "tmpfs.jsonl")
    inner = " && ".join([
        "mount -t tmpfs -o size=%d tmpfs %s" % (total * 3 // 2 + 4096, mount),
        "mkdir %s" % work,
        " ".join(cmd + ["--steps", str(steps), "--save-dir", work,
                        "--save-every", str(args.every), "--log-jsonl", log]) +
        "; echo status $?",
        "ls -a %s" % work,
        " ".join(cmd + ["--steps", str(args.every), "--save-dir", work]) +
        "; echo resumed $?"])
    status, out = run(["unshare", "--user", "--map-root-user", "--mount",
                       "sh", "-c", inner])
    if "No space left on device" not in out or "status 1" not in out:
        fail("full disk (tmpfs): expected 'No space left on device' and "
             "status 1:\n" + out)
    listing = out[out.index("status 1"):out.index("resuming from")]
    if "step-%08d.safetensors" % args.every not in listing or \
            ".step-" in listing or "step-%08d.safetensors\n" % steps in \
            listing or "step-%08d.safetensors.index" % steps in listing:
        fail("full disk (tmpfs): the directory held:\n" + listing)
    if "resumed 0" not in out or "nothing to run" not in out:
        fail("full disk (tmpfs): the previous checkpoint did not load:\n" +
             out)
    ref.check_losses(log, "full disk (tmpfs)")
    message = [l for l in out.splitlines() if "No space left" in l][0]
    print("full disk (tmpfs): " + message.strip())


def main():
    argv = sys.argv[1:]
    split = argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["soak", "kill-in-save", "full-disk"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--few", action="store_true",
                        help="kill-in-save: three offsets per rank")
    parser.add_argument("--timeout", type=float, default=30)
    args = parser.parse_args(argv[:split])
    cmd = argv[split + 1:]
    os.makedirs(args.dir, exist_ok=True)
    {"soak": soak, "kill-in-save": kill_in_save,
     "full-disk": full_disk}[args.mode](args, cmd)


if __name__ == "__main__":
    main()
