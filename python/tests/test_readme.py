"""Every Python block in the README runs as written."""
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_examples():
    assert python_blocks(), "the README shows a Python example"


def test_readme_python_examples_run(monkeypatch):
    # From the repository root, as the README runs them (a block names a file by its path
    # there), wherever pytest was started.
    monkeypatch.chdir(README.parent)
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), {})
