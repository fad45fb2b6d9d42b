"""Runs a command and checks that it ends within a bound, whatever it does.

Usage: bounded.py SECONDS COMMAND [ARGS...]

Prints the command's output (stdout and stderr together), then
`exit status N` (or `killed by signal N`) and `ended within SECONDS s`.
Exits 0 when the command ended in time, whatever its status (the test
checks the printed status), and 1 after killing it (and everything it
started) when it did not: a hang fails the test instead of stalling it.
"""

import os
import signal
import subprocess
import sys
import time


def main():
    bound = float(sys.argv[1])
    command = sys.argv[2:]
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        sys.stdout.write(out.decode(errors="replace"))
        print("TIMEOUT: still running after %g s" % bound)
        return 1
    elapsed = time.monotonic() - start
    sys.stdout.write(out.decode(errors="replace"))
    if proc.returncode < 0:
        print("killed by signal %d" % -proc.returncode)
    else:
        print("exit status %d" % proc.returncode)
    print("ended within %g s (%.1f s)" % (bound, elapsed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
