"""Runs a benchmark script's server side as a child process of the same script: the child
prints `PORT n` first, the client runs against that port, and the child must then exit with
status 0. Imported by the scripts beside it (bench_cuda_stream_sync.py, bench_py_overhead.py)."""
import subprocess
import sys


def run_with_server(server_args, client):
    """Starts `python server_args...`, calls `client(port)` once the child printed its port,
    then waits for the child (30 s at most). Returns the client's result and what the child printed after
    its port. Exits with a message if the child does not start or fails; kills it if the
    client failed."""
    srv = subprocess.Popen([sys.executable, *server_args], stdout=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline()
        if not line.startswith("PORT "):
            raise SystemExit(f"server did not start (said {line!r})")
        result = client(int(line.split()[1]))
        rest, _ = srv.communicate(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
    if srv.returncode:
        raise SystemExit(f"server exited with status {srv.returncode}")
    return result, rest
