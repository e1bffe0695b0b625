"""Floods, short forms (scripts/flood.py; the long forms flood 32 MiB a cycle, and 1 GiB against
a 64 MiB cap): unread messages from a closed endpoint's peer must not accumulate from one
flood to the next, and a peer flooding an open endpoint is cut off at the cap."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_unread_messages_of_closed_endpoints_do_not_accumulate():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "flood.py"), "--messages", "2048", "--cycles", "4"],
        capture_output=True, text=True, timeout=300,
    )
    report = "\n".join(line for line in out.stdout.splitlines() if line.startswith("flood:"))
    assert out.returncode == 0, report + out.stderr[-2000:]
    assert report.count("after close") == 4, report


@pytest.mark.parametrize("how", [["--messages", "65536"], ["--stream", "--messages", "4096", "--size", "65536"]], ids=["tag", "stream"])
def test_a_flood_of_an_open_endpoint_is_cut_off_at_the_cap(how):
    # 256 MiB offered against a 16 MiB cap.
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "flood.py"), "--cap", str(16 << 20), *how],
        capture_output=True, text=True, timeout=300,
    )
    report = "\n".join(line for line in out.stdout.splitlines() if line.startswith("flood:"))
    assert out.returncode == 0, report + out.stderr[-2000:]
    assert "cut off by the server: True" in report, report
