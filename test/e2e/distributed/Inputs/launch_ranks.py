"""Starts N ranks of a command the way torchrun, srun or mpirun does,
without merak-exec's own --nproc parent, and reports how each one ended.

Usage: launch_ranks.py [--style torchrun|slurm|mpirun] N BOUND COMMAND...

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; slurm
SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE; mpirun
OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE. All three get
MASTER_ADDR=127.0.0.1 and a free MASTER_PORT.

Each rank's output is printed after it ends, prefixed with `[rank K]`,
then `rank K: exit status S` (or `killed by signal S`), in rank order.
A rank still running BOUND seconds after the start (a stopped one) is
killed and reported as `rank K: still running after BOUND s`. Exits 0;
the test checks what was printed.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STYLES = {
    "torchrun": ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    "slurm": ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
              "SLURM_NTASKS_PER_NODE"),
    "mpirun": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
}


def main():
    args = sys.argv[1:]
    style = "torchrun"
    if args[0] == "--style":
        style, args = args[1], args[2:]
    n, bound = int(args[0]), float(args[1])
    command = args[2:]
    rank_var, size_var, local_var, local_size_var = STYLES[style]
    port = free_port()
    procs, logs = [], []
    for rank in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.update({rank_var: str(rank), size_var: str(n),
                    local_var: str(rank), local_size_var: str(n)})
        log = tempfile.TemporaryFile()
        procs.append(subprocess.Popen(command, env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
        logs.append(log)
    deadline = time.monotonic() + bound
    ends = [None] * n
    while time.monotonic() < deadline and None in ends:
        for rank, proc in enumerate(procs):
            if ends[rank] is None and proc.poll() is not None:
                code = proc.returncode
                ends[rank] = ("killed by signal %d" % -code if code < 0
                              else "exit status %d" % code)
        time.sleep(0.05)
    for rank, proc in enumerate(procs):
        if ends[rank] is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            ends[rank] = "still running after %g s" % bound
    for rank in range(n):
        logs[rank].seek(0)
        for line in logs[rank].read().decode(errors="replace").splitlines():
            print("[rank %d] %s" % (rank, line))
        print("rank %d: %s" % (rank, ends[rank]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
