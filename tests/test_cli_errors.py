"""One argument-error style for every command (issue 28 item 5): a bad argument is one line on
stderr, `gradblock NAME: ... (see gradblock NAME --help)`, and exit status 2 -- never argparse's
usage dump. Every command's parser is codec.errors.UsageParser."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gradblock import cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_a_bad_argument_is_one_line_and_exit_2(name, capsys):
    assert cli.main([name, "--no-such-option"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"gradblock {name}: ") and f"(see gradblock {name} --help)" in err, err
    assert "usage:" not in err


@pytest.mark.parametrize("name", ["decode", "train"])
def test_help_still_prints_and_exits_0(name, capsys):
    assert cli.main([name, "--help"]) == 0
    assert f"usage: gradblock {name}" in capsys.readouterr().out


def test_every_command_module_builds_its_parser_from_usage_parser():
    """A command module constructing argparse.ArgumentParser itself would bring back the dump."""
    modules = {m for m, _, _ in cli.COMMANDS.values()}
    bad = []
    for mod in sorted(modules):
        top, _, rest = mod.partition(".")[2].partition(".")
        folder = {"commands": "gradblock", "golden_cli": "gradblock", "demo": "gradblock"}.get(top, top)
        path = ROOT / folder / (rest.replace(".", "/") + ".py" if rest else top + ".py")
        if folder == "gradblock":
            path = ROOT / "gradblock" / f"{top}.py"
        tree = ast.parse(path.read_text())
        bad += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "ArgumentParser"]
    assert not bad, "build command parsers with gradblock.codec.errors.UsageParser:\n" + "\n".join(bad)
