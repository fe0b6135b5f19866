"""The ``forward`` signature a wrapper module gives torch.export, which names the
program's inputs by it."""

from __future__ import annotations

import inspect
import keyword
import re


def forward_signature(names: list[str] | None):
    """``forward(self, <names>)``: what torch.export names a wrapper's inputs by, given to
    its ``forward`` (which takes ``*args``) as ``__signature__``. Names that are not
    Python identifiers are made so (ONNX's ``input.1``: ``input_1``); ``forward(self,
    *args)`` for None or names that would then collide."""
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    made = [re.sub(r"\W|^(?=\d)", "_", n) for n in names or []]
    made = [f"{n}_" if keyword.iskeyword(n) or n == "self" else n for n in made]
    if names is None or len(set(made)) != len(made):
        return inspect.Signature([this, inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)])
    return inspect.Signature([this, *(inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in made)])
