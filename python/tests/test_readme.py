"""Every Python block of the README and of the documentation (docs/**/*.md) runs as written.

A block fenced ```python runs; one fenced ```python-norun (it needs a launcher, a GPU or a
second process) does not, and CONTRIBUTING.md asks that such blocks stay rare. A block that
needs an optional package (Dask, CuPy) or libhwloc skips when it is missing."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\S*)\n(.*?)^```", flags=re.S | re.M)
# What a block may need that `pip install .` does not bring: a missing one skips the block.
OPTIONAL_MODULES = {"distributed", "dask", "cupy", "torch", "rmm", "numba", "pandas", "pyarrow"}


def pages():
    return [README] + sorted(DOCS.rglob("*.md"))


def blocks(path, language="python"):
    """(line, code) of each block of ``path`` fenced with ``language``."""
    text = path.read_text()
    return [
        (text.count("\n", 0, m.start()) + 1, m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) == language
    ]


def all_blocks():
    return [
        pytest.param(path, line, code, id=f"{path.relative_to(ROOT)}:{line}")
        for path in pages()
        for line, code in blocks(path)
    ]


def test_the_readme_and_the_docs_show_python_examples():
    assert blocks(README), "the README shows a Python example"
    assert len(all_blocks()) > len(blocks(README)), "the docs show Python examples too"


def test_blocks_that_do_not_run_are_rare():
    norun = [(p.name, line) for p in pages() for line, _ in blocks(p, "python-norun")]
    assert len(norun) <= len(all_blocks()) // 2, f"more blocks left unrun than run: {norun}"


def test_the_block_reader_finds_fences_and_their_languages(tmp_path):
    # A reader that finds nothing would let every block go untested.
    page = tmp_path / "page.md"
    page.write_text("text\n```python\nx = 1\n```\n```python-norun\ny\n```\n```text\nz\n```\n")
    assert blocks(page) == [(2, "x = 1\n")]
    assert blocks(page, "python-norun") == [(5, "y\n")]


@pytest.mark.parametrize("path, line, code", all_blocks())
def test_python_block_runs(path, line, code, monkeypatch):
    # From the repository root, as a reader runs them (a block names a file by its path
    # there), wherever pytest was started; as a script (`__main__`), as it would be saved.
    monkeypatch.chdir(ROOT)
    try:
        exec(compile("\n" * (line) + code, str(path), "exec"), {"__name__": "__main__"})
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in OPTIONAL_MODULES:
            pytest.skip(f"{path.name}:{line} needs {e.name}: {e}")
        raise
    except OSError as e:
        if "hwloc is unavailable" in str(e):
            pytest.skip(f"{path.name}:{line} needs libhwloc: {e}")
        raise
