"""Scripts that start a peer process never hang when one side dies: the example
and the benchmark are started, one of their processes is SIGKILLed mid-transfer, and the script
must exit non-zero within seconds, leaving no process behind."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEADLINE = 30  # seconds from the kill to the script's exit


def children(pid):
    """The spawned worker processes of `pid` (not multiprocessing's resource tracker)."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in f.read().split():
                with open(f"/proc/{child}/cmdline", "rb") as c:
                    if b"spawn_main" in c.read():
                        out.append(int(child))
    return sorted(out)


def wait_for(predicate, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def kill_and_expect_exit(script, victim_index, n_children, ready):
    """Starts `script`, waits until it has `n_children` spawned processes and `ready` is
    printed, kills child `victim_index` (by age) and checks the script exits non-zero."""
    proc = subprocess.Popen(script, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        line = wait_for(lambda: ready in (proc.stdout.readline() or ready), 120, repr(ready))
        assert line
        kids = wait_for(lambda: len(children(proc.pid)) == n_children and children(proc.pid), 60, "the children")
        time.sleep(0.5)  # mid-transfer
        os.kill(kids[victim_index], signal.SIGKILL)
        start = time.monotonic()
        try:
            code = proc.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{script[1:]} still running {DEADLINE} s after a peer was killed")
        assert code != 0, f"{script[1:]} exited 0 after a peer was killed"
        assert time.monotonic() - start < DEADLINE
        for k in kids:
            wait_for(lambda: not alive(k), 10, f"process {k} to end")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_python_echo_exits_when_its_server_dies():
    script = [sys.executable, str(ROOT / "examples" / "python" / "echo.py"), "--iters", "1000000"]
    kill_and_expect_exit(script, 0, 1, "one-way p50")


@pytest.mark.parametrize("victim, name", [(0, "server"), (1, "client")])
def test_send_recv_benchmark_exits_when_a_side_dies(victim, name):
    script = [
        sys.executable, "-m", "ucp.benchmarks.send_recv",
        "--n-bytes", "1MiB", "--n-iter", "1000000", "--server-address", "127.0.0.1",
    ]
    kill_and_expect_exit(script, victim, 2, "Client connecting")
