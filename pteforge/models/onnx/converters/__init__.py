"""onnx2torch converters for what real files and current exporters write that onnx2torch
1.5 lacks or computes differently from ONNX: ``LSTM`` (silero-vad, ddddocr's recognizer)
and ``GRU`` as ``torch.nn.LSTM``/``GRU``; ``Attention`` and ``RMSNormalization`` (opset
23); ``LayerNormalization`` on any axis; ``Resize`` in all its modes; pools and convolutions
ONNX pads differently from torch; ``Pad`` and the reductions of opset 18 on; ``Gelu``,
``Size``, ``CumSum``, ``ConvInteger``, ``Clip``, ``Flatten``, ``Pow``; ``GlobalMaxPool``
(Magika); the classic machine-learning operators scikit-learn's converter writes around a
network or a linear model (``ml.py``). Then each operator version onnx2torch lacks that means what an older one means
(``register_same_meaning``). Each converter takes what ONNX allows that PyTorch computes
the same way, and raises ``NotImplementedError`` naming what it does not take (peepholes, clipping,
custom activations, per-batch sequence lengths, an attribute a newer version added), which
the import's error then names with its node. ``bench/onnx_conformance.py`` measures them
on ONNX's own node tests."""

from __future__ import annotations

import functools

from .elementwise import _register_elementwise
from .ml import UNCONVERTIBLE, _register_ml
from .layers import _register_attention, _register_global_max_pool, _register_norms, _register_small
from .recurrent import _register_gru, _register_lstm
from .resize import _register_resize
from .shapes import _register_pools, _register_same_padding, _register_shapes, _register_transposed_padding
from .versions import _refile_misfiled_versions, added, register_same_meaning

__all__ = ["UNCONVERTIBLE", "added", "register", "register_same_meaning"]


@functools.cache
def register() -> None:
    """Add the converters to onnx2torch's registry (once per process): pteforge's own, then
    each operator's versions onnx2torch lacks that mean what an older one it has means."""
    _register_global_max_pool()
    _register_lstm()
    _register_gru()
    _register_attention()
    _register_norms()
    _register_small()
    _register_shapes()
    _register_pools()
    _register_same_padding()
    _register_transposed_padding()
    _register_resize()
    _register_elementwise()
    _register_ml()
    _refile_misfiled_versions()
    register_same_meaning()
