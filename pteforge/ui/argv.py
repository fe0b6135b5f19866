"""The command line's parser class: a usage error is one line naming the cause and the fix
(a :class:`UsageError`, rendered as every other failure is, ``--json`` included), never
argparse's usage dump; a typo gets the closest option, value or command; and no option is
taken for an abbreviation of another (``--backend`` is not ``--backends``)."""

from __future__ import annotations

import argparse
import functools
import re

from ..core import registry
from ..core.errors import UsageError

closest = functools.partial(registry.closest, cutoff=0.6)  # a flag or command: difflib's default closeness


class Parser(argparse.ArgumentParser):
    """An ArgumentParser without abbreviations whose errors raise :class:`UsageError`;
    its subparsers are of this class too (``add_subparsers`` makes them of the parent's)."""

    export_parser: argparse.ArgumentParser  # the top level's: its export command's (cli._build_parser)

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        sub = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is not None and message.startswith("the following arguments are required") \
                and str(sub.metavar or sub.dest) in message:  # a subparsers' metavar is one word
            message = f"{self.prog} needs a command: {', '.join(sub.choices)}"
        raise UsageError(f"{message} (see {self.prog} --help)")

    def _check_value(self, action, value):
        """A value not among its option's choices (``--target andriod``), or an unknown
        subcommand (``manifest chek``): the closest choice, else the choices."""
        if action.choices is None or value in action.choices:
            return
        choices = [str(c) for c in action.choices]
        near = closest(value, choices)
        if isinstance(action, argparse._SubParsersAction):
            said = f"unknown command '{self.prog} {value}'"
            hint = f": did you mean '{self.prog} {near}'? (" if near else f" (the commands: {', '.join(choices)}; "
        else:
            said = f"invalid {action.option_strings[0] if action.option_strings else action.metavar or action.dest}" \
                   f" '{value}'"
            hint = f": did you mean '{near}'? (" if near else f" (choose from {', '.join(choices)}; "
        raise UsageError(f"{said}{hint}see {self.prog} --help)")


def unknown_command(word: str, commands) -> UsageError:
    """The first word of a command line, not a command (``pteforge exprt``)."""
    near = closest(word, commands)
    hint = f": did you mean '{near}'? (" if near else f" (the commands: {', '.join(commands)}; "
    return UsageError(f"unknown command '{word}'{hint}see pteforge --help)")


def command_parsers(parser: argparse.ArgumentParser, args) -> list[argparse.ArgumentParser]:
    """The parsers that read ``args``: the top level's, its command's, its subcommand's."""
    chain = [parser]
    while True:
        sub = next((a for a in chain[-1]._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None:
            return chain
        name = getattr(args, sub.dest, None)
        if name not in sub.choices:
            return chain
        chain.append(sub.choices[name])


def unrecognised(parser: argparse.ArgumentParser, args, extra: list[str]) -> UsageError:
    """What parse_known_args left over: an unknown option (with the closest of its command's
    options), else a word no argument takes."""
    chain = command_parsers(parser, args)
    see = f"(see {chain[-1].prog} --help)"
    options = [o for p in chain[1:] or chain for a in p._actions for o in a.option_strings]
    for word in extra:
        if word.startswith("-") and len(word) > 1:
            flag = word.split("=", 1)[0]
            near = closest(flag, options)
            return UsageError(f"unknown option {flag}{f': did you mean {near}?' if near else ''} {see}")
    shapes = [w for w in extra if _SHAPE.match(w)]
    if shapes and "--input-shape" in options:  # ``--input-shape a=1,3 b=1,1``: one shape per flag
        again = " ".join(f"--input-shape {w}" for w in shapes)
        return UsageError(f"unexpected argument{'s' if len(extra) > 1 else ''} '{' '.join(extra)}': --input-shape "
                          f"takes one shape, so repeat it for each input ({again}) {see}")
    return UsageError(f"unexpected argument{'s' if len(extra) > 1 else ''} '{' '.join(extra)}' {see}")


# What --input-shape takes: [NAME=][DTYPE:]N,C,H,W (or a scalar's value)
_SHAPE = re.compile(r"^(\w[\w.:/-]*=)?(\w+:)?-?\d+(,-?\d+)*$")
