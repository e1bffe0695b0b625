"""ucp.collective: Python ranks under ``python -m ucp.launch``, a job mixing Python ranks with
ucx-async's (the Rust ``alltoall`` example), the launcher's failure handling, and the
launcher variables. Ranks are separate processes on 127.0.0.1."""
import importlib.util
import os
import re
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ucp import _ucx_async as native
from ucp.collective import free_port, launch_env
from conftest import launched_ranks_pass
from test_processes import ROOT

RANK_SCRIPT = str(ROOT / "python" / "tests" / "collective_rank.py")




def _finish(procs, timeout=60):
    """Waits for every process; returns their (status, stdout) pairs. A hang fails."""
    out = []
    try:
        for p in procs:
            stdout, _ = p.communicate(timeout=timeout)
            out.append((p.returncode, stdout))
    finally:
        for p in procs:
            p.kill()
    return out


@pytest.mark.parametrize("path", [[], ["buffered", "4099"], ["direct", "1"]])
def test_python_ranks_under_the_launcher(path):
    """Three ranks: alltoallv with random sizes (zero included), allgather, messages by rank
    and tag, barrier; each rank checks every byte. Parts go the automatic way, through the
    bounce pool in batches of 4099 bytes (many batches, a short last one), or directly."""
    p = subprocess.run(
        [sys.executable, "-m", "ucp.launch", "-n", "3", RANK_SCRIPT, "selftest", *path],
        capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    # The ranks share the pipe, so their lines may interleave.
    assert all(f"OK rank {r}" in p.stdout for r in range(3)), p.stdout
    # With error handling (the default) UCX keeps CMA off, and large parts go by the
    # same-host single-copy path instead (1 MiB from each of 2 peers at least), unless in
    # batches smaller than its threshold.
    assert all(f"CMA rank {r}: False" in p.stdout for r in range(3)), p.stdout
    least = 0 if path[:1] == ["buffered"] else 2
    counts = _single_copy_counts(p.stdout)
    assert len(counts) == 3 and all(s >= least and r >= least for s, r in counts), p.stdout


def _single_copy_counts(stdout):
    """Each rank's ``SINGLE_COPY rank R: sent received`` as ``(sent, received)`` (the ranks
    share the pipe, so a line may run on into another rank's)."""
    return [(int(s), int(r)) for s, r in re.findall(r"SINGLE_COPY rank \d+: (\d+) (\d+)", stdout)]


@pytest.mark.parametrize("error_handling", ["peer", "none"])
def test_python_ranks_without_the_inline_spin(error_handling):
    """``UCXPY_SPIN_US=0``: the native calls (``collective_call``) post everything and spin
    for nothing, so what they post is left to Python (sends and receives in flight,
    announcements still to come) and settled through the event loop; the selftest's bytes
    still all arrive, and its cancelled call leaves nothing behind."""
    env = dict(os.environ, UCXPY_SPIN_US="0", UCXA_ERROR_HANDLING=error_handling)
    p = subprocess.run(
        [sys.executable, "-m", "ucp.launch", "-n", "3", RANK_SCRIPT, "selftest"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(f"OK rank {r}" in p.stdout for r in range(3)), p.stdout


@pytest.mark.parametrize("error_handling", ["peer", "none"])
def test_shared_window_moves_parts_of_any_size_and_keeps_a_slow_readers(error_handling):
    """``SharedWindow`` on three ranks, with and without peer error handling (the mapping
    needs no transport): random sizes on both sides of the slot, zero included, every window
    mapped, every byte checked; a slow reader's parts stay while the others start the next
    call (they write the other half); a window of 2 MiB and more is reached on huge pages."""
    env = dict(os.environ, UCXA_ERROR_HANDLING=error_handling)
    p = subprocess.run(
        [sys.executable, "-m", "ucp.launch", "-n", "3", RANK_SCRIPT, "window"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(f"OK rank {r}" in p.stdout for r in range(3)), p.stdout


@pytest.mark.parametrize("window", [[], ["--window"]])
def test_the_python_alltoall_benchmark_times_each_size(window):
    """``examples/python/alltoall.py``, with ``alltoallv_into`` or ``--window``
    (``SharedWindow``): a RESULT line per size, each call's parts checked by the example."""
    p = subprocess.run(
        [sys.executable, "-m", "ucp.launch", "-n", "2", str(ROOT / "examples" / "python" / "alltoall.py"),
         "--max-size", "16384", "--iters", "3", *window],
        capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    impl = "ucp-python-window" if window else "ucp-python"
    for size in (1024, 4096, 16384):
        assert f"RESULT impl={impl} ranks=2 size={size} " in p.stdout, p.stdout


def test_alltoallv_device_protocol_on_host_memory():
    """``alltoallv_device``'s messages (sizes through a host alltoallv, then each part as one
    message, the own part through the loopback endpoint) checked with host parts and a
    bytearray allocator, three ranks, random sizes with zeros: every byte arrives. Device
    memory itself is test_cuda.py's (``test_alltoallv_device_between_ranks``)."""
    launched_ranks_pass(3, RANK_SCRIPT, "device", "host")


@pytest.mark.parametrize("path", [[], ["buffered", "4099"]])
def test_python_ranks_without_error_handling(path):
    """``UCXA_ERROR_HANDLING=none``: the same selftest, and the endpoints reach each other
    through CMA, which UCX keeps off for endpoints that handle a peer's failure."""
    p = subprocess.run(
        [sys.executable, "-m", "ucp.launch", "-n", "3", RANK_SCRIPT, "selftest", *path],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, UCXA_ERROR_HANDLING="none"),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(f"OK rank {r}" in p.stdout for r in range(3)), p.stdout
    assert all(f"CMA rank {r}: True" in p.stdout for r in range(3)), p.stdout
    assert _single_copy_counts(p.stdout) == [(0, 0)] * 3, p.stdout


def test_a_rank_whose_error_handling_differs_is_refused_by_name():
    """Rank 1 of 2 says ``none``, rank 0 ``peer``: rank 0 fails naming the mismatch, and rank
    1 hears it from rank 0 at once instead of waiting for a table."""
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), UCX_NET_DEVICES="lo")
    procs = [
        subprocess.Popen(
            [sys.executable, RANK_SCRIPT, "selftest"],
            env=dict(env, RANK=str(r), UCXA_ERROR_HANDLING=("peer", "none")[r]),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for r in range(2)
    ]
    started = time.monotonic()
    results = _finish(procs, timeout=30)
    assert time.monotonic() - started < 20, results
    want = "rank 1 was started with UCXA_ERROR_HANDLING=none, rank 0 with peer"
    assert results[0][0] != 0 and want in results[0][1], results[0]
    assert results[1][0] != 0 and f"rank 0 refused this rank: {want}" in results[1][1], results[1]


def test_the_launcher_takes_its_ranks_with_it(tmp_path):
    """Killing ``python -m ucp.launch`` ends its ranks (prctl PR_SET_PDEATHSIG): without error
    handling nothing else would stop a rank whose peer died."""
    script = tmp_path / "sleep.py"
    # One write per line: print() writes the newline separately when unbuffered
    # (PYTHONUNBUFFERED), and the two ranks' writes to the shared pipe then interleave.
    script.write_text("import os, time\nos.write(1, f'{os.getpid()}\\n'.encode())\ntime.sleep(60)\n")
    launcher = subprocess.Popen([sys.executable, "-m", "ucp.launch", "-n", "2", str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(launcher.stdout.readline()) for _ in range(2)]
        launcher.kill()
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids):
            assert time.monotonic() < deadline, f"ranks {pids} outlive their launcher"
            time.sleep(0.05)
    finally:
        launcher.kill()


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return ") Z " not in f.read()  # a zombie has exited
    except FileNotFoundError:
        return False


def test_a_rank_that_leaves_costs_the_others_nothing_of_each_others():
    """The last of 3 ranks leaves mid-job: the other two's alltoallv fails for it without
    hanging, and each still has the other's 1 MiB part whole (as in ucx-async); then a small
    alltoallv (done natively) fails the same way, with the other's 1000 bytes whole."""
    env = dict(os.environ, WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), UCX_NET_DEVICES="lo")
    procs = [
        subprocess.Popen([sys.executable, RANK_SCRIPT, "rank-gone"], env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True)
        for r in range(3)
    ]
    results = _finish(procs, timeout=60)
    for rank, (status, stdout) in enumerate(results[:2]):
        assert status == 0 and stdout.count(f"FAILED AS EXPECTED rank {rank}") == 2 and f"OK rank {rank}" in stdout, (rank, status, stdout)


def test_alltoallv_device_survives_a_rank_whose_allocation_fails():
    """Rank 1 of 3 cannot allocate room for the parts ``alltoallv_device`` announced to it:
    it receives and drops them, raises its allocator's error, and the others' calls complete
    with every part; a second call then works on every rank (the communicator stayed in step)."""
    launched_ranks_pass(3, RANK_SCRIPT, "device-allocation-fails")


def test_a_part_too_large_to_allocate_fails_only_its_receiver():
    """Rank 1 announces 2**50 bytes to rank 0: rank 0 cannot allocate them, drops the message
    that comes (so rank 1's send completes) and fails its call naming the size; ranks 1 and 2
    complete theirs, and the next call works on every rank."""
    launched_ranks_pass(3, RANK_SCRIPT, "huge-announcement")


def test_launcher_stops_the_job_when_a_rank_fails(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(3)\ntime.sleep(60)\n")
    p = subprocess.run([sys.executable, "-m", "ucp.launch", "-n", "3", str(script)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert "status 3; stopping the others" in p.stderr


@pytest.fixture(scope="module")
def rust_examples():
    """The ucx-async alltoall and hash_join examples' directory, built now (a no-op when
    `cargo test` just built them): a binary left from an older checkout would speak an older
    bootstrap."""
    cmd = ["cargo", "build", "-q", "-p", "ucx-async", "--example", "alltoall", "--example", "hash_join"]
    subprocess.run(cmd, cwd=ROOT, check=True)
    return ROOT / "target" / "debug" / "examples"


@pytest.fixture(scope="module")
def rust_alltoall(rust_examples):
    return str(rust_examples / "alltoall")


@pytest.mark.parametrize(
    "rust_ranks, rust_path, py_path, error_handling",
    [
        ([1], "auto", "auto", "peer"),
        ([0, 2], "auto", "auto", "peer"),
        ([1], "buffered", "direct", "peer"),
        ([0, 2], "direct", "buffered", "peer"),
        ([0, 2], "auto", "auto", "none"),
    ],
)
def test_python_and_rust_ranks_share_a_job(rust_alltoall, rust_ranks, rust_path, py_path, error_handling):
    """Python ranks run the exact sequence of examples/alltoall.rs beside Rust ranks running
    it (the same tags, bootstrap bytes and announcements): every rank finishes and the data
    checks out. Either language can be rank 0, and either can send its parts in batches
    through its bounce pool (3000 bytes: many batches per part) while the other sends whole;
    with error handling or, in both languages, without."""
    rust = [rust_alltoall, "--max-size", "65536", "--iters", "3", "--path", rust_path, "--batch", "3000"]
    python = [sys.executable, RANK_SCRIPT, "mirror-alltoall", "65536", "3", py_path, "3000"]
    _mixed_job(rust_ranks, error_handling, rust, python, "RESULT impl=ucx-async")


@pytest.mark.parametrize("rust_ranks, error_handling", [([1], "peer"), ([0, 2], "none")])
def test_python_and_rust_ranks_share_a_shared_window(rust_alltoall, rust_ranks, error_handling):
    """Python ranks run the exact sequence of ``alltoall --window-only`` beside Rust ranks
    running it (the same window entries and notes, ucx-core's ``wire::shared_window``): every
    rank finishes and the parts check out, each in its receiver's window."""
    rust = [rust_alltoall, "--max-size", "65536", "--iters", "3", "--window-only"]
    python = [sys.executable, RANK_SCRIPT, "mirror-window", "65536", "3"]
    _mixed_job(rust_ranks, error_handling, rust, python, "RESULT impl=window")


def _mixed_job(rust_ranks, error_handling, rust_cmd, python_cmd, rank_0_says):
    """Three ranks, those in ``rust_ranks`` running ``rust_cmd`` and the others
    ``python_cmd``: every rank exits 0, each Python rank says OK, and a Rust rank 0 prints
    ``rank_0_says``."""
    env = dict(os.environ, WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), UCX_NET_DEVICES="lo")
    env["UCXA_ERROR_HANDLING"] = error_handling
    procs = []
    for rank in range(3):
        cmd = rust_cmd if rank in rust_ranks else python_cmd
        procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE, text=True))
    for rank, (status, stdout) in enumerate(_finish(procs)):
        assert status == 0, (rank, stdout)
        if rank not in rust_ranks:
            assert f"OK rank {rank}" in stdout
        elif rank == 0:
            assert rank_0_says in stdout


def _stale_rendezvous(path):
    """An earlier job's rendezvous file: an address nobody listens on any more."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path.write_text(native.rendezvous_text("127.0.0.1", port))


def test_ranks_meet_at_a_rendezvous_file_with_mpi_variables_only(tmp_path):
    """Open MPI's variables and a rendezvous file, no MASTER_ADDR/MASTER_PORT (mpirun sets
    none): rank 0 starts last, over a file an earlier job left; every rank runs the selftest,
    and the file is gone after."""
    path = tmp_path / "job.addr"
    _stale_rendezvous(path)
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    env.update(OMPI_COMM_WORLD_SIZE="3", UCXA_RENDEZVOUS_FILE=str(path), UCX_NET_DEVICES="lo")
    procs = []
    for rank in (1, 2, 0):
        if rank == 0:
            time.sleep(0.5)  # the others have found the old file
        cmd = [sys.executable, RANK_SCRIPT, "selftest"]
        procs.append(subprocess.Popen(cmd, env=dict(env, OMPI_COMM_WORLD_RANK=str(rank)), stdout=subprocess.PIPE, text=True))
    for status, stdout in _finish(procs):
        assert status == 0, stdout
        assert "OK rank" in stdout
    assert not path.exists(), "rank 0 removes the file once every rank has joined"


def test_python_and_rust_ranks_meet_at_a_rendezvous_file(rust_alltoall, tmp_path):
    """The same file format in both languages: a Rust rank 1 between Python ranks 0 and 2."""
    path = tmp_path / "job.addr"
    _stale_rendezvous(path)
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update(WORLD_SIZE="3", UCXA_RENDEZVOUS_FILE=str(path), UCX_NET_DEVICES="lo")
    procs = []
    for rank in range(3):
        if rank == 1:
            cmd = [rust_alltoall, "--max-size", "4096", "--iters", "2"]
        else:
            cmd = [sys.executable, RANK_SCRIPT, "mirror-alltoall", "4096", "2"]
        procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE, text=True))
    for rank, (status, stdout) in enumerate(_finish(procs)):
        assert status == 0, (rank, stdout)
    assert not path.exists()


HASH_JOIN_PY = str(ROOT / "examples" / "python" / "hash_join.py")


def _result_line(stdout):
    return next((line for line in stdout.splitlines() if line.startswith("RESULT ")), None)


@pytest.mark.parametrize("exchange", ["host", "device"])
def test_python_hash_join_matches_its_single_process_join_and_the_rust_example(rust_examples, exchange):
    """examples/python/hash_join.py on 3 ranks: its result equals the single-process join and
    the Rust example's result for the same tables, whether the partitions go through
    ``alltoallv`` or (sorted by destination, as on a GPU) through ``alltoallv_device``."""
    p = subprocess.run(
        [sys.executable, "-m", "ucp.launch", "-n", "3", HASH_JOIN_PY, "--rows", "20000", "--exchange", exchange],
        capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    ours = _result_line(p.stdout)
    assert ours is not None and ours.endswith("matches the single-process join"), p.stdout
    rust = subprocess.run(
        [str(rust_examples / "hash_join"), "--ranks", "3", "--rows", "20000"],
        capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")},  # it launches its ranks
    )
    assert rust.returncode == 0, rust.stdout + rust.stderr
    assert _result_line(rust.stdout) == ours


def test_hash_join_with_python_rank_0_and_rust_ranks(rust_examples):
    env = dict(os.environ, WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), UCX_NET_DEVICES="lo")
    cmds = [[sys.executable, HASH_JOIN_PY, "--rows", "20000"]] + [[str(rust_examples / "hash_join"), "--rows", "20000"]] * 2
    procs = [subprocess.Popen(c, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True) for r, c in enumerate(cmds)]
    results = _finish(procs)
    assert all(status == 0 for status, _ in results), results
    assert _result_line(results[0][1]).endswith("matches the single-process join"), results[0][1]


def test_free_port_is_outside_the_kernels_ephemeral_range_and_free():
    """A launcher's port for rank 0 is one the kernel never hands a starting rank's sockets
    (bound to port 0) by itself, and nothing holds it (CI once failed when a rank's UCX held
    rank 0's port: "Address already in use")."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(v) for v in f.read().split())
    for _ in range(20):
        port = free_port()
        assert 10000 <= port <= 65535 and not low <= port <= high, (port, low, high)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_launch_env_reads_torchrun_mpi_and_pmi_and_names_bad_values():
    root = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for r, s in [("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")]:
        assert launch_env({r: "2", s: "4", **root}) == (2, 4, "127.0.0.1", 29500)
    # A rendezvous file needs no port, and wins over MASTER_PORT; MASTER_ADDR says where rank 0 listens.
    rdv = {"UCXA_RENDEZVOUS_FILE": "/shared/job.addr"}
    assert launch_env({"PMI_RANK": "1", "PMI_SIZE": "2", **rdv}) == (1, 2, "127.0.0.1", None)
    assert launch_env({"RANK": "0", "WORLD_SIZE": "2", **root, **rdv}) == (0, 2, "127.0.0.1", None)
    for env, text in [
        (root, "no launcher variables"),
        ({"RANK": "x", "WORLD_SIZE": "2", **root}, "RANK='x'"),
        ({"RANK": "2", "WORLD_SIZE": "2", **root}, "not below WORLD_SIZE=2"),
        ({"RANK": "0", "WORLD_SIZE": "70000", **root}, "1 to 65536"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, "MASTER_ADDR"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "0"}, "MASTER_PORT=0"),
    ]:
        with pytest.raises(ValueError, match=text.replace("(", r"\(")):
            launch_env(env)


def test_tags_and_bootstrap_bytes_are_ucx_cores():
    """The same values as ucx-core's own tests of the layout and the bootstrap format."""
    assert native.collective_user_tag(0x1234, 3) == 0x0000_1234_0003_0000
    assert native.collective_own_tag(5, 65535, 65535) == 0x8000_0005_FFFF_FFFF
    with pytest.raises(ValueError, match="0x80000000"):
        native.collective_user_tag(1 << 31, 0)
    with pytest.raises(ValueError, match="rank 65536"):
        native.collective_own_tag(0, 1 << 16, 0)
    hello = b"UCXC\x02\x00\x03\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\xaa"
    assert native.bootstrap_hello(3, 4, b"\xaa") == hello
    assert native.bootstrap_hello(3, 4, b"\xaa", False)[14:18] == b"\x01\x00\x00\x00"
    assert native.bootstrap_hello_admit(native.bootstrap_hello(1, 2, b"xy"), 2, True) == (1, b"xy")
    with pytest.raises(ValueError, match="world size 3, rank 0 with 2"):
        native.bootstrap_hello_admit(native.bootstrap_hello(1, 3, b"xy"), 2, True)
    with pytest.raises(ValueError, match="UCXA_ERROR_HANDLING=none, rank 0 with peer"):
        native.bootstrap_hello_admit(native.bootstrap_hello(1, 2, b"xy", False), 2, True)
    assert native.bootstrap_table_decode(native.bootstrap_table([b"a", b""])) == [b"a", b""]
    with pytest.raises(ValueError, match="rank 0 refused this rank: no room"):
        native.bootstrap_table_decode(native.bootstrap_refusal("no room"))
    assert [native.error_handling_parse(v) for v in (None, "", "peer", "none")] == [True, True, True, False]
    with pytest.raises(ValueError, match="UCXA_ERROR_HANDLING='off'|UCXA_ERROR_HANDLING=\"off\""):
        native.error_handling_parse("off")
    with pytest.raises(ValueError, match="cut short"):
        native.bootstrap_table_decode(native.bootstrap_table([b"abc"])[:-1])


def test_the_spin_budget_grows_with_a_calls_bytes_as_ucx_cores_rule():
    """``spin_budget_us`` is ucx-core's ``spin_budget``, on a thread whose core is not shared (a
    fresh one's is not; one whose earlier spins saw it shared gets nothing added): the base
    plus the bytes' time at 8 GB/s (at most 1 ms); for device memory, plus 500 µs
    (``ucx_core::DEVICE_SPIN``: a small GPU transfer's time is the driver's fixed costs) and
    the bytes at 100 GB/s, at most 2 ms. No spin asked (others ready to run): none given."""
    if os.environ.get("UCXA_DEVICE_SPIN_US"):
        pytest.skip("UCXA_DEVICE_SPIN_US overrides the default")
    host = [(100, n) for n in (0, 7999, 1 << 20, 1 << 30)]
    device = [(100, n, True) for n in (8, 64 << 20, 1 << 30)] + [(0, 8, True)]
    got = []
    t = threading.Thread(target=lambda: got.extend(native.spin_budget_us(*a) for a in host + device))
    t.start()
    t.join()
    assert got == [100, 100, 231, 1100] + [600, 1271, 2100, 0]


def test_a_collective_spins_with_the_bytes_it_still_moves(monkeypatch):
    """What a call's operations move reaches the spin's budget: a 1 MiB send and receive
    posted through ``Posted``, still in flight when it settles, ask for a budget over 2 MiB
    (a flat budget would fall through to the event loop while UCX copies the part)."""
    from conftest import pair, run
    from ucp.collective.posted import Posted

    asked = []
    budget = native.spin_budget_us
    monkeypatch.setattr(native, "spin_budget_us", lambda us, n, device: asked.append(n) or budget(us, n, device))

    async def main():
        lf, client, server = await pair()
        part = bytes(range(256)) * 4096
        got = bytearray(len(part))
        posted = Posted()
        posted.recv(server, memoryview(got), 7)
        posted.send(client, part, 7)
        await posted.settle()
        assert got == part
        await client.close()
        lf.close()

    run(main())
    assert asked and max(asked) >= 2 << 20, asked


def test_posted_tells_device_buffers_for_the_spin():
    """``Posted`` counts a call's bytes, and whether any are device memory (the budget's
    device allowance), by the buffer type's ``__cuda_array_interface__``."""
    from ucp.collective.posted import Posted, is_device

    class DeviceArray:  # CuPy-shaped: the interface is a property of the type
        nbytes = 64

        @property
        def __cuda_array_interface__(self):
            raise AssertionError("the spin's budget must not build the interface")

    posted = Posted()
    posted.count(bytearray(8))
    assert (posted.nbytes, posted.device) == (8, False)
    posted.count(DeviceArray())
    assert (posted.nbytes, posted.device) == (72, True)
    assert is_device(DeviceArray()) and not is_device(memoryview(b"x"))


def test_each_rank_gets_the_devices_nearest_its_gpu():
    """``net_devices="auto"``: a rank's devices are those nearest the GPU of its local rank
    (on the shipped DGX-like topology: two GPUs per PCIe switch share its NIC)."""
    from ucp.collective import local_rank, rank_net_devices

    dgx = str(ROOT / "crates/ucx-topology/tests/data/dgx.xml")
    got = [rank_net_devices({"LOCAL_RANK": str(r)}, xml=dgx) for r in range(8)]
    if got[0] is None:
        pytest.skip("XML topologies need libhwloc")
    assert got == ["mlx5_0:1,ib0"] * 2 + ["mlx5_1:1,ib1"] * 2 + ["mlx5_2:2,ib2"] * 2 + ["mlx5_3:1,ib3"] * 2
    assert local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "3"}) == 3
    assert local_rank({}) == 0
    with pytest.raises(ValueError, match="LOCAL_RANK='x' is not a number"):
        local_rank({"LOCAL_RANK": "x"})


def test_the_bootstrap_talks_on_a_worker_of_its_own(fresh_ucp):
    """Rank 0's listener and every bootstrap endpoint live on ``boot_context``'s worker, never
    on ``ucp``'s (a listener's endpoint there would leave UCX polling TCP on the ranks' worker
    for good), while the table hands out the ranks' own worker addresses."""
    import asyncio

    import ucp
    from ucp.collective import bootstrap

    async def main():
        mine = bytes(ucp.get_worker_address())
        boots = [bootstrap.boot_context(), bootstrap.boot_context()]
        main_ctx = ucp.core._get_ctx()
        assert all(b.context is main_ctx.context and b.worker is not main_ctx.worker for b in boots)
        port = free_port()
        served, joined = await asyncio.gather(
            bootstrap.serve(boots[0], 2, "127.0.0.1", port, mine, error_handling=False),
            bootstrap.join(boots[1], 1, 2, "127.0.0.1", port, b"rank 1", error_handling=False),
        )
        assert served[0] == joined[0] == [mine, b"rank 1"]
        for (_, eps), boot in zip([served, joined], boots):
            assert [ep._ctx for ep in eps] == [boot]
            for ep in eps:
                ep.abort()
        for boot in boots:
            boot._stop()

    asyncio.run(main())


def test_the_bootstrap_leaves_no_pass_of_its_stopped_driver_queued(fresh_ucp):
    """The bootstrap's worker is stopped once the ranks are connected; a pass its driver had
    queued does nothing when it runs, and the bootstrap lets it run before returning, so
    collectives that complete without suspending do not find it queued at every call's spin
    decision (``inline_spin_us``)."""
    import asyncio

    from ucp.collective import Communicator

    async def main():
        comm = await Communicator.bootstrap(0, 1, "127.0.0.1", free_port(), error_handling=False)
        loop = asyncio.get_running_loop()
        stopped = [
            h for h in loop._ready if getattr(getattr(h._callback, "__self__", None), "_fd", 0) is None
        ]
        assert not stopped, f"passes of a stopped driver still queued: {stopped}"
        await comm.close()

    asyncio.run(main())


def _hash_join_module():
    """examples/python/hash_join.py, imported."""
    spec = importlib.util.spec_from_file_location("hash_join_example", HASH_JOIN_PY)
    hj = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hj)
    return hj


def test_the_python_join_by_key_table_equals_a_pair_by_pair_join():
    """``join`` indexes a table by key where the left keys' range is small, and sorts both
    sides otherwise: either way every matching pair counts once, duplicates on both sides and
    right keys beyond the left's range included, as a pair-by-pair join finds them."""
    hj = _hash_join_module()
    rng = np.random.default_rng(11)

    def pair_by_pair(lk, lp, rk, rp):
        pairs, checksum = 0, 0
        for key, payload in zip(rk, rp):
            hit = lk == key
            pairs += int(hit.sum())
            with np.errstate(over="ignore"):
                checksum += int(hj.mix((lp[hit] * np.uint64(31)) ^ payload).sum(dtype=np.uint64))
        return pairs, checksum & 0xFFFFFFFFFFFFFFFF

    cases = [
        (50, 80, 1000, 700),  # a small range: the table, with many keys held several times
        (4000, 4000, 1000, 1000),  # keys mostly held once: the table
        (1 << 40, 1 << 40, 300, 300),  # a wide range: sorted
        (10, 10, 0, 50),  # an empty side
    ]
    for left_high, right_high, nl, nr in cases:
        lk = rng.integers(0, left_high, nl, dtype=np.uint64)
        rk = rng.integers(0, right_high, nr, dtype=np.uint64)
        if nl:
            rk[: nr // 3] = rng.choice(lk, nr // 3)  # matches, whatever the range
        lp = rng.integers(0, 1 << 63, nl, dtype=np.uint64)
        rp = rng.integers(0, 1 << 63, nr, dtype=np.uint64)
        expected = pair_by_pair(lk, lp, rk, rp)
        assert hj.join(lk, lp, rk, rp) == expected, (left_high, nl, nr)
        assert hj._join_sorted(lk, lp, rk, rp) == expected, (left_high, nl, nr)
    assert expected[0] == 0
    lk = np.arange(100, dtype=np.uint64)
    assert hj.join(lk, lk, lk, lk)[0] == 100


def test_the_python_join_sorts_rows_by_key_with_or_without_packing():
    """``sorted_by_key`` packs key and row index into one sort where they fit in 64 bits, and
    falls back to an argsort where they do not: either way the keys come out sorted and each
    payload stays with its key."""
    hj = _hash_join_module()
    rng = np.random.default_rng(7)
    for high in (1 << 20, 1 << 62):  # packed; too wide to pack
        keys = rng.integers(0, high, 5000, dtype=np.uint64)
        payload = keys * np.uint64(3) + np.uint64(1)
        k, p = hj.sorted_by_key(keys, payload)
        assert np.array_equal(k, np.sort(keys)), high
        assert np.array_equal(p, k * np.uint64(3) + np.uint64(1)), high
    k, p = hj.sorted_by_key(np.array([], dtype=np.uint64), np.array([], dtype=np.uint64))
    assert len(k) == 0 and len(p) == 0
