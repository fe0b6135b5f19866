"""Facts read from a ``.pte`` file itself (no runtime): delegates and operators.

Used to validate files that have no manifest entry, and to prove that an artifact
contains the delegates its target names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PteFacts:
    delegates: list[str]
    operators: list[str]


def read_pte(path_or_bytes) -> PteFacts:
    from executorch.exir._serialize._program import deserialize_pte_binary

    from .stages.lower import program_delegates, program_operators

    data = Path(path_or_bytes).read_bytes() if not isinstance(path_or_bytes, (bytes, bytearray)) else bytes(path_or_bytes)
    pte = deserialize_pte_binary(data)
    program = getattr(pte, "program", pte)
    return PteFacts(program_delegates(program), program_operators(program))
