"""`python -m fovea <command>`: the one command line hands each command to its module's main, and a
module run on its own only calls its main."""
from pathlib import Path

import pytest

from fovea.__main__ import COMMANDS, main


def test_each_command_reaches_its_modules_own_parser(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "--help"])
    assert done.value.code == 0 and "python -m fovea.bench" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        main(["analysis", "ood", "--help"])
    assert done.value.code == 0 and "--n" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="usage: python -m fovea.train"):
        main(["train", "no-such-subcommand"])                       # fovea.train's own dispatcher answers


def test_an_unknown_command_lists_the_commands_and_none_prints_the_help(capsys):
    with pytest.raises(SystemExit, match="unknown command 'serve'") as done:
        main(["serve"])
    assert all(" ".join(words) in str(done.value) for words in COMMANDS)
    main([])
    assert "python -m fovea <command>" in capsys.readouterr().out


ROOT = Path(__file__).resolve().parents[1]
MAIN_BLOCK = 'if __name__ == "__main__":'


def _runnable_modules() -> dict[str, str]:
    """{module: what follows its `if __name__ == "__main__":`} for every such module in fovea/ and app/."""
    out = {}
    for path in [*ROOT.glob("fovea/**/*.py"), *ROOT.glob("app/*.py")]:
        text = path.read_text()
        if MAIN_BLOCK in text:
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__main__")
            out[name] = text.split(MAIN_BLOCK, 1)[1]   # a package's __main__ runs as the package
    return out


def test_a_module_run_on_its_own_only_calls_its_main():
    assert {m: body.strip() for m, body in _runnable_modules().items() if body.strip() != "main()"} == {}


def test_every_library_command_is_reachable_from_the_one_command_line():
    from fovea import train

    # fovea.bench.diffusion is `python -m fovea bench --diffusion`; the app's commands live beside the app
    reachable = {"fovea", *COMMANDS.values(), *train.COMMANDS.values(), "fovea.bench.diffusion"}
    library = {m for m in _runnable_modules() if m.split(".")[0] == "fovea"}
    assert library - reachable == set()
    for name in train.COMMANDS:
        with pytest.raises(SystemExit) as done:
            main(["train", name, "--help"])
        assert done.value.code == 0, name


def test_the_examples_command_parses_its_folder_and_looks_flag(capsys):
    with pytest.raises(SystemExit) as done:
        main(["examples", "--help"])
    assert done.value.code == 0 and "--looks" in capsys.readouterr().out


@pytest.mark.parametrize("argv, expected", [
    (["--bench", "no/such/results.json"], "--bench no/such/results.json: no such results file"),
    (["--target", "no/such/target"], "--target no/such/target: not a model folder"),
])
def test_app_measure_names_a_bad_reference_before_starting_the_app(argv, expected, capsys):
    from app import measure

    with pytest.raises(SystemExit):
        measure.main(argv)
    assert expected in capsys.readouterr().err
