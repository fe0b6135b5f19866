"""A mistyped command line: one line on stderr with the closest option, value or command, the
usage error's exit code and no usage dump; no option is taken for an abbreviation of another."""

import argparse
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from pteforge import cli
from pteforge.core.errors import ExitStatus


def refused(capsys, *args) -> tuple[str, str]:
    """A command line that must not parse: its one error line, and stdout."""
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    assert code == ExitStatus.USAGE == 2, err
    assert "usage:" not in out + err and "Traceback" not in err, err
    [line] = err.splitlines()
    assert line.startswith("error: ")
    return line, out


@pytest.mark.parametrize("args, needles", [
    (["--backnds", "xnnpack"], ["unknown option --backnds", "did you mean --backends?", "pteforge export --help"]),
    (["--backend", "xnnpack"], ["unknown option --backend", "did you mean --backends?"]),  # no abbreviation
    (["export", "--backnds=xnnpack"], ["unknown option --backnds", "did you mean --backends?"]),
    (["--target", "andriod"], ["invalid --target 'andriod'", "did you mean 'android'?"]),
    (["--target", "nowhere"], ["invalid --target 'nowhere'", "android, desktop"]),
    (["--target"], ["--target/--platform: expected one argument", "pteforge export --help"]),
    (["exprt", "--mobilenet"], ["unknown command 'exprt'", "did you mean 'export'?", "pteforge --help"]),
    (["-q", "valdate"], ["unknown command 'valdate'", "did you mean 'validate'?"]),
    (["publsh", "out"], ["unknown command 'publsh'", "did you mean 'publish'?"]),
    (["frobnicate"], ["unknown command 'frobnicate'", "the commands: export, validate"]),
    (["manifest", "chek", "x"], ["unknown command 'pteforge manifest chek'", "did you mean 'pteforge manifest check'?"]),
    (["cache", "clr"], ["did you mean 'pteforge cache clear'?", "pteforge cache --help"]),
    (["manifest"], ["pteforge manifest needs a command: check, schema"]),
    (["manifest", "check", "x", "--jso"], ["unknown option --jso", "did you mean --json?"]),
    (["select", "models", "--platfrom", "ios", "m"], ["unknown option --platfrom", "did you mean --platform?"]),
    (["validate", "a", "b"], ["unexpected argument 'b'", "pteforge validate --help"]),
    (["export", "--model", "m.py", "--input-shape", "image=1,3,32,32", "mask=1,1,32,32"],
     ["unexpected argument 'mask=1,1,32,32'", "repeat it for each input (--input-shape mask=1,1,32,32)"]),
    (["bench", "--runs", "x"], ["--runs: invalid int value: 'x'", "pteforge bench --help"]),
])
def test_a_typo_is_one_line_with_the_closest_match(capsys, args, needles):
    line, _ = refused(capsys, *args)
    for needle in needles:
        assert needle in line, line


def test_with_json_a_typo_is_one_error_document(capsys):
    line, out = refused(capsys, "--json", "--backnds", "xnnpack")
    document = json.loads(out)
    assert document == {"error": line.removeprefix("error: "), "exitCode": int(ExitStatus.USAGE)}
    assert "did you mean --backends?" in document["error"]


def test_no_parser_takes_abbreviations():
    """Every parser, the subcommands' (manifest check, cache clear) too."""
    parsers, seen = [cli._build_parser()], 0
    while parsers:
        parser = parsers.pop()
        assert parser.allow_abbrev is False, parser.prog
        seen += 1
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += list(action.choices.values())
    assert seen > len(cli.COMMANDS)


def test_a_correct_command_line_parses_as_before():
    parser = cli._build_parser()
    args = cli._parse(parser, ["-q", "validate"])
    assert (args.command, args.quiet, args.dir) == ("validate", True, None)
    assert cli._parse(parser, ["select", "models", "--platform", "ios", "m"]).names == ["models", "m"]
    args = cli._parse(parser, ["--mobilenet", "mobilenet_v2", "--backends", "xnnpack"])
    assert (args.command, args.mobilenet, args.backends) == ("export", ["mobilenet_v2"], ["xnnpack"])
    assert cli._parse(parser, ["manifest", "check", "x", "--json"]).json is True


def test_help_still_prints_help(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["export", "--help"])
    assert exc.value.code == 0 and "usage: pteforge export" in capsys.readouterr().out


def test_as_users_run_it_a_typo_is_one_line_on_stderr():
    proc = subprocess.run([sys.executable, "-m", "pteforge", "--target", "andriod"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == ExitStatus.USAGE and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "error: invalid --target 'andriod': did you mean 'android'? (see pteforge export --help)"]
