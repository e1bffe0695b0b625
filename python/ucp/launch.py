"""``python -m ucp.launch -n N script.py [args...]``: runs N copies of a script as the ranks of
one job on this host, with the variables torchrun sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``; and ``UCX_NET_DEVICES=lo``
unless set), for ``ucp.collective.Communicator.from_env``. Exits with the first failing
rank's status (the others are stopped), or 0; the ranks die with the launcher (Linux), since
with ``UCXA_ERROR_HANDLING=none`` a rank cannot tell that a peer died."""
import argparse
import ctypes
import signal
import os
import subprocess
import sys
import time

from .collective.launch import free_port


try:
    _LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child only calls it
except OSError:
    _LIBC = None
_PR_SET_PDEATHSIG = 1


def _die_with_launcher():
    """Runs in each rank between fork and exec: SIGKILL when the launcher dies (prctl)."""
    if _LIBC is not None and hasattr(_LIBC, "prctl"):
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ucp.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--nproc", type=int, default=2, help="how many ranks (default 2)")
    parser.add_argument("script", help="the Python script each rank runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    opts = parser.parse_args(argv)
    if opts.nproc < 1:
        parser.error(f"-n must be at least 1, not {opts.nproc}")
    port = free_port()  # for rank 0, which binds it once it starts
    procs = []
    for rank in range(opts.nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(opts.nproc))
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.setdefault("UCX_NET_DEVICES", "lo")
        cmd = [sys.executable, opts.script, *opts.args]
        procs.append(subprocess.Popen(cmd, env=env, preexec_fn=_die_with_launcher if sys.platform == "linux" else None))
    status = 0
    while procs:
        for p in list(procs):
            code = p.poll()
            if code is None:
                continue
            procs.remove(p)
            if code != 0 and status == 0:
                status = code
                print(f"ucp.launch: a rank exited with status {code}; stopping the others", file=sys.stderr)
                for q in procs:
                    q.terminate()
        time.sleep(0.05)
    return status


if __name__ == "__main__":
    sys.exit(main())
