"""Flood and close, short form (scripts/flood.py; the long form floods 32 MiB a cycle): unread
messages from a closed endpoint's peer must not accumulate from one flood to the next."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_unread_messages_of_closed_endpoints_do_not_accumulate():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "flood.py"), "--messages", "2048", "--cycles", "4"],
        capture_output=True, text=True, timeout=300,
    )
    report = "\n".join(line for line in out.stdout.splitlines() if line.startswith("flood:"))
    assert out.returncode == 0, report + out.stderr[-2000:]
    assert report.count("after close") == 4, report
