"""`python -m fovea <command>`: the one command line hands each command to its module's main."""
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
