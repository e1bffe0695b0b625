"""``python -m ucp.doctor`` run as users run it, against the UCX this environment has: every
section is there, ``--json`` parses and says the same, a ``UCX_*`` value the user set shows as
the user's (and is the one UCX's protocol tables follow), the self-test moves data, and a
broken set-up exits non-zero saying why."""
import json
import os
import subprocess
import sys
import time

import pytest

import ucp

HEADINGS = [
    "== UCX ==",
    "== Transports by memory type ==",
    "== Protocols per message size ==",
    "== UCX_* settings ==",
    "== Topology ==",
    "== System ==",
    "== Self-test ==",
    "== Notes ==",
]
SECTIONS = ["ucx", "transports", "protocols", "defaults", "topology", "system", "selftest"]


def doctor(*args, env=None, code=None):
    """Runs the doctor in a fresh interpreter, in this environment as it was before ``import
    ucp`` set its defaults (conftest's ``UCX_NET_DEVICES=lo`` stays); ``code`` replaces ``-m
    ucp.doctor``."""
    unset = {"UCX_RNDV_THRESH", *ucp._defaults_applied}
    base = {k: v for k, v in os.environ.items() if k not in unset}
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "ucp.doctor", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**base, **(env or {})})


def test_the_text_report_has_every_section_and_a_self_test_that_moved_data():
    out = doctor()
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    for heading in HEADINGS:
        assert heading in text, f"{heading} missing:\n{text}"
    assert "PROBLEMS" not in text, text
    assert f"version      {ucp.get_ucx_version()[0]}.{ucp.get_ucx_version()[1]}." in text, text
    assert "second UCX   no" in text, text
    selftest = text.split("== Self-test ==")[1]
    assert "MB/s" in selftest and "over 127.0.0.1" in selftest, text


def test_json_report_parses_with_every_section_and_the_users_setting():
    out = doctor("--json", env={"UCX_RNDV_THRESH": "1234"})
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    for name in SECTIONS:
        assert isinstance(report[name], dict) and "error" not in report[name], (name, report[name])
    assert report["problems"] == []

    ucx = report["ucx"]
    assert ucx["version"] == "%d.%d.%d" % ucp.get_ucx_version()
    assert len(ucx["libraries"]["libucp"]) == 1 and not ucx["second_ucx"], ucx
    assert os.path.realpath(ucx["path"]) == ucx["libraries"]["libucp"][0], ucx
    assert "tcp/lo" in report["transports"]["by_memory_type"]["host"], report["transports"]

    defaults = report["defaults"]
    assert defaults["user"] == {"UCX_RNDV_THRESH": "1234"}, defaults
    assert "UCX_RNDV_THRESH" not in defaults["applied"]
    assert defaults["applied"]["UCX_MEMTYPE_CACHE"] == "n", defaults
    assert defaults["other"].get("UCX_NET_DEVICES") == os.environ.get("UCX_NET_DEVICES"), defaults

    protocols = report["protocols"]
    for key in ("error_handling_on", "error_handling_off"):
        table = protocols[key]
        assert "intra-node" in table["config"], table
        assert set(table["by_size"]) == {str(s) for s in protocols["sizes"]}, table
        # The user's threshold is the one UCX used: a rendezvous starts at 1234 bytes.
        assert any(r["range"].startswith("1234..") and "rendezvous" in r["protocol"] for r in table["rows"]), table

    selftest = report["selftest"]
    assert selftest["bandwidth"] > 0 and selftest["memcpy"] > 0, selftest
    assert selftest["messages"] >= 2 and selftest["transports"], selftest
    assert selftest["protocol"] and selftest["transport"], selftest
    # Two of our processes on one host: the 1 MiB messages go by the single-copy path (all but
    # those sent before the two sides' hello exchange finished), where the kernel lets this
    # process read its peer's memory.
    assert 0 <= selftest["single_copy_messages"] <= selftest["messages"], selftest
    if (report["system"]["ptrace_scope"] or 0) < 2:
        assert selftest["single_copy_messages"] >= selftest["messages"] // 2, selftest
    assert report["system"]["huge_pages"].keys() == {"enabled", "shmem_enabled"}
    # The kernel's congestion control, as this process's network namespace has it.
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            expected = f.read().strip()
    except OSError:
        expected = None
    assert report["system"]["tcp_congestion_control"] == expected, report["system"]


def test_a_self_test_without_the_single_copy_path_says_its_messages_went_over_tcp():
    out = doctor(env={"UCXA_SINGLE_COPY": "0"})
    assert out.returncode == 0, out.stdout + out.stderr
    selftest = out.stdout.split("== Self-test ==")[1].split("== Notes ==")[0]
    assert "single-copy" not in selftest and "1 MiB went as" in selftest and "[tcp/" in selftest, selftest
    notes = out.stdout.split("== Notes ==")[1]
    assert "single-copy path carried none of the self-test's messages" in notes, notes


@pytest.mark.parametrize(
    "copied, says",
    [(5, "large ones go by the same-host single-copy path"), (0, "carried none of"), (None, "host data between")],
)
def test_the_tcp_note_says_what_the_single_copy_path_carried(copied, says):
    from ucp import _doctor_facts

    report = {
        "protocols": {"error_handling_on": {"by_size": {str(1 << 20): {"transport": "tcp/lo"}}}},
        "selftest": None if copied is None else {"single_copy_messages": copied},
    }
    notes = _doctor_facts.notes(report)
    assert len(notes) == 1 and says in notes[0], notes
    assert ("carried none" in notes[0]) == (copied == 0), notes


def test_no_selftest_skips_it():
    out = doctor("--json", "--no-selftest")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["selftest"] is None


def test_a_context_ucx_cannot_make_is_a_problem_and_exit_status_1():
    out = doctor("--no-selftest", env={"UCX_TLS": "bogus"})
    assert out.returncode == 1, out.stdout + out.stderr
    problems = out.stdout.split("== PROBLEMS ==")[1]
    assert "transport 'bogus' is not available" in problems, out.stdout


def test_ucx_that_cannot_be_loaded_exits_non_zero_saying_so(tmp_path):
    # No libucx wheel to preload UCX, and a broken libucp.so.0 first on the loader's path.
    (tmp_path / "libucp.so.0").write_text("not a library")
    code = "import sys; sys.modules['libucx'] = None; import runpy; runpy.run_module('ucp.doctor', run_name='__main__')"
    out = doctor(code=code, env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert out.returncode != 0, out.stdout
    assert "ucp cannot load the UCX library" in out.stderr and "libucp.so.0" in out.stderr, out.stderr


def test_set_default_records_whose_value_holds(monkeypatch):
    monkeypatch.setattr(ucp, "_defaults_applied", {})
    monkeypatch.setattr(ucp, "_user_set", {})
    for name in ("UCX_DOCTOR_TEST_A", "UCX_DOCTOR_TEST_C"):
        # Unset, in a way monkeypatch undoes: whatever _set_default sets is gone afterwards.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("UCX_DOCTOR_TEST_B", "mine")
    ucp._set_default("UCX_DOCTOR_TEST_A", "1")
    ucp._set_default("UCX_DOCTOR_TEST_B", "2")
    ucp._set_default("UCX_DOCTOR_TEST_C", lambda: None)  # no default here
    assert os.environ["UCX_DOCTOR_TEST_A"] == "1" and os.environ["UCX_DOCTOR_TEST_B"] == "mine"
    assert "UCX_DOCTOR_TEST_C" not in os.environ
    assert ucp._defaults_applied == {"UCX_DOCTOR_TEST_A": "1"}
    assert ucp._user_set == {"UCX_DOCTOR_TEST_B": "mine"}


@pytest.mark.parametrize("scope, note", [(2, "CAP_SYS_PTRACE"), (3, "unavailable"), (0, None), (None, None)])
def test_notes_name_a_ptrace_scope_that_limits_cma(scope, note):
    from ucp import _doctor_facts

    notes = _doctor_facts.notes({"system": {"ptrace_scope": scope}})
    assert any(note in n for n in notes) if note else not notes, notes


FAKE_PYNVML = '''
class NVMLError(Exception):
    pass
class _Memory:
    total = 80 << 30
class _Bar1:
    bar1Total = 128 << 30
def nvmlInit(): pass
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetMigMode(handle): return (0, 0)
def nvmlDeviceGetMemoryInfo(handle): return _Memory()
def nvmlDeviceGetBAR1MemoryInfo(handle): return _Bar1()
'''


def test_the_registration_ratio_default_is_recorded_as_the_others(tmp_path):
    # A stand-in pynvml whose one GPU's BAR1 covers its memory: ucp sets the ratio to 1.0.
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    code = "import ucp; print(ucp._defaults_applied.get('UCX_CUDA_COPY_MAX_REG_RATIO'), ucp._user_set)"
    env = {"PYTHONPATH": str(tmp_path)}
    out = doctor(code=code, env=env)
    assert out.stdout.split() == ["1.0", "{}"], out.stdout + out.stderr
    out = doctor(code=code, env={**env, "UCX_CUDA_COPY_MAX_REG_RATIO": "0.5"})
    assert out.stdout.strip() == "None {'UCX_CUDA_COPY_MAX_REG_RATIO': '0.5'}", out.stdout + out.stderr


def test_a_self_test_whose_peer_fails_is_a_problem_named_at_once():
    # The receiving process is `false`: it exits at once, and the report says so without
    # waiting out the self-test's time limit.
    code = "import sys; import ucp.doctor as d; sys.executable = '/bin/false'; sys.exit(d.main([]))"
    start = time.monotonic()
    out = doctor(code=code)
    assert out.returncode == 1, out.stdout + out.stderr
    problems = out.stdout.split("== PROBLEMS ==")[1]
    assert "selftest: RuntimeError: the receiving process did not take the messages" in problems, out.stdout
    assert time.monotonic() - start < 20, "the failure waited for the time limit"
