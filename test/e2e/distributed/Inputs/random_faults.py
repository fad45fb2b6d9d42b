"""Kills (SIGKILL) or freezes (SIGSTOP) one rank of a run at a random moment
and checks that every other rank exits non-zero, in time, naming it.

Usage:
    random_faults.py --seed S --ranks N --comm-timeout T [options] -- COMMAND...

COMMAND is a merak-exec command line without --nproc or --comm-timeout
(the harness adds them); rank 0 prints its `step K/N` lines, as merak-exec
does.

A calibration run without a fault must succeed; it measures when rank 0
reported its first and last step and when every rank had ended. Then, for
each signal of --signals, --cases runs. Each draws from a generator seeded
by (S, --label, case number) the rank to hit (the victim) and a moment:
  - start-up (1 in 5): a time after the start, up to the calibration's
    first step (loading, lowering, the rendezvous, connecting the groups);
  - steps (13 in 20): a step K rank 0 reports and a fraction of a step's
    time after it: inside step K+1, in a kernel, a collective or a transfer;
  - end (3 in 20): up to a step's time plus the calibration's tail after
    the last step but one: the last step, the report, the final barrier.
Moments in steps wait for rank 0's report, so they fall inside the run
however loaded the machine is. The harness sends the signal at that moment
and checks every other rank (a survivor):
  - it ends within T plus --margin seconds of the fault, or the case fails
    (and it is killed: a hang cannot stall the test);
  - it exits with a non-zero status, not by a signal; status 0 only if it
    had ended before the fault, or the fault came once the last step had
    begun (a rank that had all it needed from the victim may end cleanly);
  - its error names the victim (`rank V`, or `ranks ..., V, ...`).
A fault that finds the victim already ended counts as `completed`, not as a
failure (rare: an end moment after a fast run). A case whose run fails
before its fault (a rank of a loaded machine late past T at the first step)
runs once more; failing again, it fails. The victim is killed at the end of
its case, stopped or not.

--launcher env (default) starts the ranks itself as torchrun does (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so each
rank's status and time are seen. --launcher nproc runs `COMMAND --nproc N`
and finds the ranks among the launcher's children; each survivor must end
in time having printed an error naming the victim (or be stopped by the
launcher after the launcher named it), and the launcher must exit non-zero.

Prints one line per case and a summary, `random faults LABEL: C cases, K
ok, D completed, F failed`; exits 1 if F > 0 (or if every case completed:
nothing was tested). A failed case's output, and the command that reruns it
alone (--only-case), also go to stderr. --fault SIGNAL:RANK:STEP:DELAY runs
one given fault instead of drawn ones; its SIGNAL may also be half-request
(SIGSTOP, and a request to the store left half sent: see SIGNALS).
"""

import argparse
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

# `half-request` stops the victim as `stop` does, then sends the store one
# byte on a connection of its own: what a rank stopped in the middle of a
# request leaves there (the store's server waits for the rest, answering no
# one), made certain instead of rare. Only with --launcher env, which knows
# the store's port.
SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP,
           "half-request": signal.SIGSTOP}
PHASES = (("start-up", 0.2), ("steps", 0.65), ("end", 0.15))
STEP_LINE = re.compile(r"step (\d+)/(\d+)\b")
ERROR = "merak-exec: error:"


def say(text, failure=False):
    """Prints a line; a failure's lines also go to stderr, which lit shows
    when the test fails even though stdout goes to a file."""
    print(text)
    sys.stdout.flush()
    if failure:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Output:
    """A stream read on a thread, each line with the time it arrived."""

    def __init__(self, stream, start):
        self.lines = []  # (seconds after start, text)
        self.start = start
        self.thread = threading.Thread(target=self._read, args=(stream,),
                                       daemon=True)
        self.thread.start()

    def _read(self, stream):
        for raw in iter(stream.readline, b""):
            self.lines.append((time.monotonic() - self.start,
                               raw.decode(errors="replace").rstrip("\n")))
        stream.close()

    def join(self):
        self.thread.join(timeout=5)

    def step_times(self):
        """When the first step and the last step of the run were reported
        (None if not), and the number of steps of the run."""
        first = last = steps = None
        for at, text in list(self.lines):
            m = STEP_LINE.search(text)
            if not m:
                continue
            if first is None:
                first = at
            steps = int(m.group(2))
            if m.group(1) == m.group(2):
                last = at
        return first, last, steps

    def step_seen(self, step):
        """When step `step` (or a later one) was reported, or None."""
        for at, text in list(self.lines):
            m = STEP_LINE.search(text)
            if m and int(m.group(1)) >= step:
                return at
        return None


def proc_state(pid):
    """The /proc state letter of `pid`, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def children_ranks(parent):
    """{rank: pid} of the processes whose parent is `parent` and whose
    environment holds RANK, or named merak-rank-R (ranks forked from the
    launcher keep its environment in /proc)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) != parent:
                continue
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for entry in env:
            if entry.startswith(b"RANK="):
                found[int(entry[5:])] = pid
        try:
            with open("/proc/%d/comm" % pid) as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith("merak-rank-") and name[11:].isdigit():
            found.setdefault(int(name[11:]), pid)
    return found


def names_rank(text, rank):
    """Whether an error message names `rank` (a global rank: `pipeline rank
    K` is a stage's index) as the one that failed."""
    return bool(re.search(r"(?<!pipeline )\brank %d\b" % rank, text) or
                re.search(r"\branks (\d+, )*%d\b(, \d+)* have stopped" % rank,
                          text))


def error_text(lines, rank=None):
    """The error lines (of `rank`, by its `rank K: ` prefix, when given),
    prefixes removed."""
    out = []
    for _, text in lines:
        i = text.find(ERROR)
        if i < 0:
            continue
        prefix = text[:i]
        if rank is not None and not prefix.endswith("rank %d: " % rank):
            continue
        out.append(text[i + len(ERROR):].strip())
    return "\n".join(out)


class EnvRun:
    """The ranks started one by one, as torchrun does."""

    def __init__(self, command, ranks, comm_timeout):
        self.start = time.monotonic()
        port = free_port()
        self.port = port
        self.procs, self.outputs = [], []
        self.ended = {}  # rank -> (seconds after start, returncode)
        for rank in range(ranks):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), RANK=str(rank),
                       WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(ranks))
            proc = subprocess.Popen(
                command + ["--comm-timeout", str(comm_timeout)], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True)
            self.procs.append(proc)
            self.outputs.append(Output(proc.stdout, self.start))

    def now(self):
        return time.monotonic() - self.start

    def pid(self, rank):
        return self.procs[rank].pid

    def poll(self):
        for rank, proc in enumerate(self.procs):
            if rank not in self.ended and proc.poll() is not None:
                self.ended[rank] = (self.now(), proc.returncode)
        return len(self.ended) == len(self.procs)

    def alive(self, rank):
        self.poll()
        return rank not in self.ended

    def kill_all(self):
        for rank, proc in enumerate(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
        self.poll()
        for out in self.outputs:
            out.join()

    def lines(self):
        merged = []
        for rank, out in enumerate(self.outputs):
            merged += [(at, "[rank %d] %s" % (rank, text))
                       for at, text in out.lines]
        return sorted(merged, key=lambda line: line[0])

    def step_times(self):
        return self.outputs[0].step_times()

    def step_seen(self, step):
        return self.outputs[0].step_seen(step)


class NprocRun:
    """merak-exec --nproc N; the ranks are its children."""

    def __init__(self, command, ranks, comm_timeout):
        self.start = time.monotonic()
        self.ranks = ranks
        self.launcher = subprocess.Popen(
            command + ["--nproc", str(ranks), "--comm-timeout",
                       str(comm_timeout)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.output = Output(self.launcher.stdout, self.start)
        self.pids = {}
        self.ended = {}  # rank -> (seconds after start, None)
        self.launcher_end = None

    def now(self):
        return time.monotonic() - self.start

    def find(self):
        if len(self.pids) < self.ranks and self.launcher.poll() is None:
            for rank, pid in children_ranks(self.launcher.pid).items():
                self.pids.setdefault(rank, pid)

    def pid(self, rank):
        self.find()
        return self.pids.get(rank)

    def poll(self):
        self.find()
        if self.launcher_end is None and self.launcher.poll() is not None:
            self.launcher_end = (self.now(), self.launcher.returncode)
        for rank, pid in self.pids.items():
            if rank not in self.ended and proc_state(pid) in (None, "Z", "X"):
                self.ended[rank] = (self.now(), None)
        if self.launcher_end is not None:
            for rank in range(self.ranks):
                self.ended.setdefault(rank, self.launcher_end)
        return self.launcher_end is not None

    def alive(self, rank):
        self.poll()
        return rank not in self.ended

    def kill_all(self):
        try:
            os.killpg(self.launcher.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.launcher.wait()
        self.poll()
        self.output.join()

    def lines(self):
        return list(self.output.lines)

    def step_times(self):
        return self.output.step_times()

    def step_seen(self, step):
        return self.output.step_seen(step)


def wait_all(run, deadline):
    while run.now() < deadline:
        if run.poll():
            return True
        time.sleep(0.01)
    return run.poll()


def calibrate(args, make):
    run = make(args.command, args.ranks, args.comm_timeout)
    done = wait_all(run, args.bound)
    run.kill_all()
    first, last, steps = run.step_times()
    lines = run.lines()
    statuses = ([code for _, code in run.ended.values()]
                if args.launcher == "env" else [run.launcher_end[1]]
                if run.launcher_end else [None])
    if not done or any(code != 0 for code in statuses) or last is None:
        say("calibration run failed (%s):" % (
            "still running after %g s" % args.bound if not done
            else "status %s" % statuses), True)
        for _, text in lines:
            say("  " + text, True)
        return None
    end = max(at for at, _ in run.ended.values())
    return first, last, end, steps


def draw(args, calibration, case):
    """The case's phase, victim and moment, from (seed, label, case) alone. A
    moment in the steps or at the end is a step rank 0 reports and a delay
    after it, so that it falls inside the run however loaded the machine."""
    rng = random.Random("%d:%s:%d" % (args.seed, args.label, case))
    first, last, end, steps = calibration
    step_time = (last - first) / max(1, steps - 1)
    phase = rng.choices([p for p, _ in PHASES], [w for _, w in PHASES])[0]
    if phase == "start-up":
        after, delay = 0, rng.random() * first
    elif phase == "steps":
        after = rng.randrange(1, max(2, steps - 1))
        delay = rng.random() * step_time
    else:
        # The last step, the report and the final barrier.
        after = steps - 1
        delay = rng.random() * (step_time + end - last)
    victim = rng.randrange(args.ranks)
    return phase, after, delay, victim


def run_case(args, make, case, sig_name, calibration):
    if args.fault:
        phase, after, delay, victim = "given", args.fault[2], args.fault[3], \
            args.fault[1]
    else:
        phase, after, delay, victim = draw(args, calibration, case)
    sig = SIGNALS[sig_name]
    label = "case %d: %s rank %d %s (%s)" % (
        case, "SIGSTOP mid-request" if sig_name == "half-request"
        else "SIG" + sig_name.upper(), victim,
        "%.3f s after step %d/%d" % (delay, after, calibration[3]) if after
        else "%.3f s after the start" % delay, phase)
    run = make(args.command, args.ranks, args.comm_timeout)
    fault_at, landed, half_request = None, False, None
    # Wait for the moment, and in --nproc runs for the victim to exist.
    while True:
        run.poll()
        pid = run.pid(victim)
        since = run.step_seen(after) if after else 0.0
        if since is not None and run.now() >= since + delay and pid is not None:
            break
        if not run.alive(victim) or run.now() > args.bound:
            break
        # A rank that failed by itself: the case fails below.
        if any(code not in (0, None) for _, code in run.ended.values()) or (
                isinstance(run, NprocRun) and run.launcher_end):
            break
        time.sleep(0.005)
    pid = run.pid(victim)
    if pid is not None and run.alive(victim) and proc_state(pid) not in (
            None, "Z", "X"):
        fault_at = run.now()
        try:
            os.kill(pid, sig)
            landed = True
        except ProcessLookupError:
            pass
        if landed and sig_name == "half-request":
            half_request = socket.create_connection(("127.0.0.1", run.port))
            half_request.sendall(b"\0")
    survivors = [r for r in range(args.ranks) if r != victim]
    deadline = ((fault_at if landed else run.now()) + args.comm_timeout +
                args.margin)
    while run.now() < deadline:
        run.poll()
        if all(r in run.ended for r in survivors):
            break
        time.sleep(0.01)
    run.poll()
    hung = [r for r in survivors if r not in run.ended]
    if isinstance(run, NprocRun) and not hung:
        # The launcher stops the victim after its grace; give it that.
        wait_all(run, run.now() + min(args.comm_timeout, 5) + args.margin)
    run.kill_all()
    if half_request is not None:
        half_request.close()
    lines = run.lines()
    # Once the last step has begun, a survivor may have had all it needed
    # from the victim and ended cleanly.
    last_began = run.step_seen(calibration[3] - 1)
    late = landed and last_began is not None and last_began <= fault_at

    problems, notes = [], []
    if not landed:
        ok = ((all(code == 0 for _, code in run.ended.values())
               if args.launcher == "env" else run.launcher_end is not None and
               run.launcher_end[1] == 0))
        if not ok:
            problems.append("the run failed without a fault")
        outcome = "completed: the run ended before the fault"
    else:
        for r in hung:
            problems.append("rank %d still running %.1f s after the fault"
                            % (r, args.comm_timeout + args.margin))
        if args.launcher == "env":
            check_env(run, victim, survivors, hung, fault_at, late, problems,
                      notes)
        else:
            check_nproc(args, run, victim, survivors, hung, fault_at, late,
                        problems, notes)
        outcome = "ok: " + "; ".join(notes)
    if problems and not landed:
        say("%s: the run failed before its fault" % label, True)
    elif problems:
        say("%s: FAILED: %s" % (label, "; ".join(problems)), True)
    else:
        say("%s: %s" % (label, outcome))
    if problems or args.verbose:
        # Of the step lines, the last one: the run's progress, not its losses.
        steps_seen = [i for i, (_, t) in enumerate(lines) if STEP_LINE.search(t)]
        hidden = set(steps_seen[:-1])
        for i, (at, text) in enumerate(lines):
            if i in hidden:
                continue
            say("  %7.2f  %s" % (at, text), bool(problems))
        say("  fault at %.2f s" % fault_at if landed else "  no fault",
            bool(problems))
    if problems:
        return ("unfaulted" if not landed else "failed"), 0.0
    slowest = max([run.ended[r][0] - fault_at for r in survivors
                   if landed and run.ended[r][0] > fault_at] or [0.0])
    return ("ok" if landed else "completed"), slowest


def check_env(run, victim, survivors, hung, fault_at, late, problems, notes):
    for r in survivors:
        if r in hung:
            continue
        at, code = run.ended[r]
        errors = error_text(run.outputs[r].lines)
        if code < 0:
            problems.append("rank %d was killed by signal %d" % (r, -code))
        elif code == 0:
            if at > fault_at and not late:
                problems.append("rank %d exited 0 %.2f s after rank %d failed "
                                "mid-run" % (r, at - fault_at, victim))
            else:
                notes.append("rank %d had finished (status 0)" % r)
        elif at < fault_at:
            problems.append("rank %d failed before the fault" % r)
        elif not names_rank(errors, victim):
            problems.append("rank %d's error does not name rank %d: %r"
                            % (r, victim, errors or "(none)"))
        else:
            notes.append("rank %d exited %d after %.2f s naming rank %d"
                         % (r, code, at - fault_at, victim))


def check_nproc(args, run, victim, survivors, hung, fault_at, late, problems,
                notes):
    text = "\n".join(t for _, t in run.lines())
    launcher = error_text([(0, t) for _, t in run.lines()
                           if t.startswith("merak-exec: error:")])
    killed = set()
    m = re.search(r"killing ranks? ([\d, ]+), still running", text)
    if m:
        killed = {int(r) for r in m.group(1).split(",")}
    status = run.launcher_end[1] if run.launcher_end else None
    if status == 0 and not late:
        problems.append("the launcher exited 0 after rank %d failed mid-run"
                        % victim)
    elif status is not None and status < 0:
        problems.append("the launcher was killed by signal %d" % -status)
    for r in survivors:
        if r in hung:
            continue
        own = error_text(run.lines(), r)
        if run.ended[r][0] < fault_at and own:
            problems.append("rank %d failed before the fault" % r)
        elif own and not names_rank(own, victim):
            problems.append("rank %d's error does not name rank %d: %r"
                            % (r, victim, own))
        elif own:
            notes.append("rank %d failed after %.2f s naming rank %d"
                         % (r, run.ended[r][0] - fault_at, victim))
        elif r in killed and names_rank(launcher, victim):
            notes.append("rank %d stopped by the launcher" % r)
        elif status != 0 and not late:
            problems.append("rank %d ended without an error naming rank %d"
                            % (r, victim))
        else:
            notes.append("rank %d had finished" % r)
    if status not in (0, None):
        notes.append("launcher status %d" % status)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", required=True,
                   help="seed of the draws (an integer, or `random`)")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--comm-timeout", type=float, required=True)
    p.add_argument("--margin", type=float, default=6.0,
                   help="seconds beyond --comm-timeout a survivor may take")
    p.add_argument("--signals", default="kill,stop")
    p.add_argument("--cases", type=int, default=2,
                   help="cases per signal")
    p.add_argument("--launcher", choices=["env", "nproc"], default="env")
    p.add_argument("--bound", type=float, default=120.0,
                   help="seconds the calibration run may take")
    p.add_argument("--only-case", type=int,
                   help="run only this case (numbered as in the output)")
    p.add_argument("--fault", metavar="SIGNAL:RANK:STEP:DELAY",
                   help="run one case with this fault instead of drawn ones: "
                        "kill, stop or half-request RANK DELAY seconds after "
                        "rank 0 reported STEP (0: after the start)")
    p.add_argument("--verbose", action="store_true",
                   help="print every case's output")
    p.add_argument("--label", default="", help="printed with the summary")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("give the command after --")
    args.seed = (random.SystemRandom().randrange(1 << 31)
                 if args.seed == "random" else int(args.seed))
    if args.fault:
        parts = args.fault.split(":")
        if len(parts) != 4 or parts[0] not in SIGNALS:
            p.error("--fault is SIGNAL:RANK:STEP:DELAY, SIGNAL kill, stop "
                    "or half-request")
        args.fault = (parts[0], int(parts[1]), int(parts[2]), float(parts[3]))
    signals = args.signals.split(",")
    for s in signals:
        if s not in SIGNALS:
            p.error("unknown signal %r (kill, stop, half-request)" % s)
    if "half-request" in signals + [args.fault[0] if args.fault else ""] and \
            args.launcher != "env":
        p.error("half-request needs --launcher env (the store's port)")
    make = EnvRun if args.launcher == "env" else NprocRun
    say("random faults%s: seed %d, %d ranks (%s launch), --comm-timeout %g"
        % (" " + args.label if args.label else "", args.seed, args.ranks,
             args.launcher, args.comm_timeout))
    calibration = calibrate(args, make)
    if calibration is None:
        return 1
    say("calibration: first step after %.2f s, last (%d) after %.2f s, "
        "ended after %.2f s" % (calibration[0], calibration[3],
                                calibration[1], calibration[2]))
    counts = {"ok": 0, "completed": 0, "failed": 0}
    slowest, case = 0.0, 0
    failed_cases = []
    if args.fault:
        signals, args.cases = [args.fault[0]], 1
    for sig_name in signals:
        for _ in range(args.cases):
            case += 1
            if args.only_case is not None and case != args.only_case:
                continue
            result, latest = run_case(args, make, case, sig_name, calibration)
            if result == "unfaulted":
                # The run failed before its fault: a time-out the machine's
                # load made (a rank late at the first step), not the
                # fault's handling. Once again; twice is a failure.
                say("case %d: the run failed before its fault; running the "
                    "case again" % case)
                result, latest = run_case(args, make, case, sig_name,
                                          calibration)
                if result == "unfaulted":
                    result = "failed"
            counts[result] += 1
            slowest = max(slowest, latest)
            if result == "failed":
                failed_cases.append(case)
    total = sum(counts.values())
    say("random faults%s: %d cases, %d ok, %d completed, %d failed "
        "(slowest survivor ended %.2f s after its fault)"
        % (" " + args.label if args.label else "", total, counts["ok"],
           counts["completed"], counts["failed"], slowest),
        counts["failed"] > 0)
    if counts["completed"] == total and total > 1:
        say("every run ended before its fault: nothing was tested (make the "
            "run longer)", True)
        return 1
    for c in failed_cases:
        # The harness's own options (before `--`), seed and case made
        # explicit, then the command.
        argv = sys.argv[1:]
        split = argv.index("--") if "--" in argv else len(argv)
        own, command = argv[:split], argv[split:]
        kept, skip = [], False
        for a in own:
            if skip:
                skip = False
            elif a in ("--seed", "--only-case"):
                skip = True
            elif not a.startswith(("--seed=", "--only-case=")):
                kept.append(a)
        rerun = ["--seed", str(args.seed), "--only-case", str(c)] + kept
        say("rerun case %d: %s %s %s" % (
            c, sys.executable, shlex.quote(sys.argv[0]),
            " ".join(shlex.quote(a) for a in rerun + command)), True)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
