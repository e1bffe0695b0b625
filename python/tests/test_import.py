"""The package imports, loads UCX from the wheel, and reports the version it loaded."""
import subprocess
import sys

import ucp


def test_reports_the_loaded_ucx_version():
    major, minor, patch = ucp.get_ucx_version()
    assert (major, minor) >= (1, 18)
    assert ucp.__ucx_version__ == f"{major}.{minor}.{patch}"


def test_version_matches_the_wheels_ucx_info():
    import os

    import libucx

    bin_dir = os.path.join(os.path.dirname(libucx.__file__), "bin")
    lib_dir = os.path.join(os.path.dirname(libucx.__file__), "lib")
    out = subprocess.run(
        [os.path.join(bin_dir, "ucx_info"), "-v"],
        env={**os.environ, "LD_LIBRARY_PATH": lib_dir},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # e.g. "# Library version: 1.22.0"
    line = next(l for l in out.splitlines() if "Library version" in l)
    assert line.split(":")[1].strip() == ucp.__ucx_version__


def test_import_does_not_override_a_users_memtype_cache_choice():
    code = "import os, ucp; print(os.environ['UCX_MEMTYPE_CACHE'])"
    env_out = subprocess.run(
        [sys.executable, "-c", code], env={"UCX_MEMTYPE_CACHE": "y", "PATH": ""}, capture_output=True, text=True
    )
    assert env_out.stdout.strip() == "y", env_out.stderr
    default_out = subprocess.run([sys.executable, "-c", code], env={"PATH": ""}, capture_output=True, text=True)
    assert default_out.stdout.strip() == "n", default_out.stderr
