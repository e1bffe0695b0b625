"""The soak's short form (scripts/soak.py; the long form runs 10 minutes): clients killed and
replaced at random while every byte is checked. Nothing may be lost or corrupted, and no
client may fail unless killed (a server that stops answering fails the clients' handshakes).
The resource bounds are loose here: a 10 s run is mostly warm-up."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_soak_short_form_loses_nothing():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "soak.py"), "--duration", "10", "--clients", "3",
         "--max-rss-growth", "1.0", "--max-fd-growth", "64", "--kill-every", "1.0"],
        capture_output=True, text=True, timeout=180,
    )
    report = "\n".join(line for line in out.stdout.splitlines() if line.startswith("soak:"))
    assert out.returncode == 0, report + out.stderr[-2000:]
    assert "data lost or corrupted: 0;" in report, report
    killed = int(report.split(" clients killed")[0].rsplit(" ", 1)[-1])
    assert killed > 0, report
