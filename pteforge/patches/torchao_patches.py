"""pteforge's patches of torchao 0.18.0 (the version uv.lock pins): the scale search of its
intx weight quantization.

Each patch checks, when applied, that torchao is ``VERSION`` and still has what it
replaces (``pteforge.patches.require``), and raises ``UpstreamChangedError`` otherwise;
each puts back what it replaced on exit.
"""

from __future__ import annotations

import contextlib

from . import replaced, require

LIBRARY, VERSION = "torchao", "0.18.0"


def check(patch: str, *targets: tuple) -> None:
    """Raise ``UpstreamChangedError`` unless torchao is ``VERSION`` and has each ``(object, attribute)``."""
    require(patch, LIBRARY, VERSION, __name__.rpartition(".")[2], *targets)


@contextlib.contextmanager
def scale_only_hqq_replaced(search):
    """Inside, torchao's intx weight quantization (``IntxWeightOnlyConfig`` and
    ``Int8DynamicActivationIntxWeightConfig`` with ``hqq_scale_only``) searches its scales
    with ``search`` instead of ``_choose_qparams_and_quantize_scale_only_hqq``:
    ``pteforge/text/hqq.py``'s ``scale_only_hqq``, row block by row block, the same numbers
    (``torch.equal``), a fifth of the time (24 s of Gemma 3 270M's 8da4w capture, its
    output matrix, on the critical path of every language model's 8da4w export)."""
    from torchao.quantization.quantize_.workflows.intx import intx_unpacked_to_int8_tensor as intx

    check("scale_only_hqq_replaced", (intx, "_choose_qparams_and_quantize_scale_only_hqq"))
    with replaced(intx, "_choose_qparams_and_quantize_scale_only_hqq", search):
        yield
