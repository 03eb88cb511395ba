"""Every command the README quotes exists and accepts the options it is quoted with.

Each `python ...` command in the README (fenced bash blocks and inline code) is handed to its own
entry point's `main(argv)` in-process; the first `ArgumentParser.parse_args` call, the command's own
parser (the dispatchers `python -m fovea` and `python -m fovea.train` use none), stops it right after
parsing. So a renamed command or option fails here, while nothing is trained, served or benchmarked.
The commands that take minutes or hours were run on a clean clone by hand (the closing notes say which).
"""
from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[str]:
    text = README.read_text()
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            found += [part.split(" #")[0].strip() for part in line.split("&&")]
    found += re.findall(r"`(python [^`]+)`", text)
    commands = []
    for c in [e for c in found for e in expand(c)]:
        c = " ".join(c.split())
        if not c.startswith("python ") or "<" in c or "..." in c or "pytest" in c or c in commands:
            continue
        commands.append(c)
    return commands


def expand(command: str) -> list[str]:
    """`python -m fovea analysis {ood,locality}` -> one command per choice."""
    m = re.search(r"\{([^}]+)\}", command)
    return [command] if not m else [command[:m.start()] + c + command[m.end():] for c in m.group(1).split(",")]


DISPATCHERS = ("fovea", "fovea.train")   # a bare dispatcher (or --help) lists its commands and runs nothing


class Parsed(Exception):
    pass


def entry(words: list[str]):
    """`python app.py ...` / `python -m module ...` -> (its main, argv)."""
    if words[1] == "app.py":
        return importlib.import_module("app_main_for_tests").main, words[2:]
    assert words[1] == "-m", words
    name = words[2]
    try:                                   # a package runs its __main__ (python -m fovea, fovea.bench)
        module = importlib.import_module(name + ".__main__")
    except ModuleNotFoundError as err:
        if err.name != name + ".__main__":
            raise
        module = importlib.import_module(name)
    return module.main, words[3:]


@pytest.fixture(scope="module", autouse=True)
def app_module():
    """app.py is a script, not a package module: import it under a test-only name."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("app_main_for_tests", README.parent / "app.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["app_main_for_tests"] = mod
    spec.loader.exec_module(mod)
    yield
    sys.modules.pop("app_main_for_tests", None)


def test_the_readme_quotes_the_commands_a_user_runs():
    commands = readme_commands()
    assert "python app.py" in commands and "python -m fovea bench" in commands
    assert any(c.startswith("python -m fovea train rebuild") for c in commands)


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_parses(command, monkeypatch):
    original = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_and_stop)
    words = shlex.split(command)
    main, argv = entry(words)
    if "--help" in argv or "-h" in argv or (words[1:2] == ["-m"] and words[2] in DISPATCHERS and not argv):
        try:
            main(argv)
        except SystemExit as done:
            assert done.code in (0, None) or "usage" in str(done.code), command
        return
    with pytest.raises(Parsed):
        main(argv)
