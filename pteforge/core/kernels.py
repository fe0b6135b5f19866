"""Which kernels a program's undelegated operators need, and who links them: ExecuTorch's
portable kernel library (every runtime build can link it), and the executorch_flutter
app's native builds.

The app's builds link (its executorch_native submodule, ``cmake/build_from_source.cmake``
at 943005a): the portable library on every platform (``EXECUTORCH_BUILD_KERNELS_PORTABLE``
ON, ``_OPTIMIZED`` OFF, l.126-127; no selective build), the quantized library in its
language-model builds only (``KERNELS_QUANTIZED`` with ``ET_BUILD_LLM``, l.103), never the
LLM custom operators (``EXECUTORCH_BUILD_KERNELS_LLM`` OFF, l.106); and the runtime's own
prim operators. A program calling any other kernel (an optimized-only one such as
``aten::_fft_r2c.out``) fails to load in the app."""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path

from .units import listed

# operators the runtime itself registers (register_prim_ops.cpp), in every build
_PRIM = ("executorch_prim::", "aten::sym_size.int", "aten::sym_numel", "aten::_local_scalar_dense")
_LLM_ONLY = "quantized_decomposed::"  # the quantized library: the app's language-model builds


@lru_cache(maxsize=1)
def portable_kernels() -> frozenset[str]:
    """The kernels of ExecuTorch's portable library (``kernels/portable/*.yaml`` of the
    installed package: ``aten::add.out``, ``dim_order_ops::_to_dim_order_copy.out``), or
    empty when the package holds no such file (then nothing is judged by it)."""
    found = importlib.util.find_spec("executorch")
    names: set[str] = set()
    for root in (found.submodule_search_locations or []) if found else []:
        for yaml in sorted((Path(root) / "kernels" / "portable").glob("*.yaml")):
            for name in re.findall(r"^- (?:op|func): *([\w.:]+)", yaml.read_text(), re.M):
                names.add(name if "::" in name else f"aten::{name}")
    return frozenset(names)


def in_no_kernel_library(operators, runtime=()) -> tuple[str, str] | None:
    """(why, fix) when the program calls an ``aten::`` kernel that neither ExecuTorch's
    portable library nor ``runtime`` (a runtime's operators: its optimized kernels, its
    prim ops) has: no runtime (the app's neither) loads it. None otherwise."""
    known = portable_kernels()
    nowhere = [op for op in dict.fromkeys(operators)
               if op.startswith("aten::") and known and op not in known and op not in runtime and not op.startswith(_PRIM)]
    if not nowhere:
        return None
    ops = listed(nowhere, 3)
    first = nowhere[0].split("::")[1].split(".")[0]
    return (f"the program calls {ops}, which no ExecuTorch kernel library has ({len(known)} kernels in its portable "
            "library): no runtime loads it, the app's neither",
            f"compute {first} in the model with other operators, or build ExecuTorch with a kernel of your own for it")


def app_unlinked(kernels, task: str | None = None) -> str | None:
    """Why the executorch_flutter app cannot load a program calling ``kernels`` (its
    undelegated operators), or None: a kernel its builds do not link (module docstring).
    The quantized library counts for a language model only (the app's LLM builds)."""
    known = portable_kernels()
    if not known:
        return None
    unlinked = [op for op in dict.fromkeys(kernels) if op not in known and not op.startswith(_PRIM)
                and not (op.startswith(_LLM_ONLY) and task == "text-generation")]
    if not unlinked:
        return None
    more = f" and {len(unlinked) - 1} more" if len(unlinked) > 1 else ""
    which = ("only its language-model builds link the quantized kernels" if unlinked[0].startswith(_LLM_ONLY)
             else "they do not link custom_ops (export with --llm-cache static for the app)"
             if unlinked[0].startswith("llama::") else "they link ExecuTorch's portable kernels only")
    return f"it calls {unlinked[0]}{more}, which no build of the app links: {which}"
