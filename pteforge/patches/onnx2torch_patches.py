"""pteforge's patch of onnx2torch 1.5.15 (the version uv.lock pins): the names it gives
the modules of nodes outside ONNX's own domain.

The patch checks, when applied, that onnx2torch is ``VERSION`` and still has what it
replaces (``pteforge.patches.require``), and raises ``UpstreamChangedError`` otherwise;
it puts back what it replaced on exit.
"""

from __future__ import annotations

import contextlib

from . import replaced, require

LIBRARY, VERSION = "onnx2torch", "1.5.15"
_MODULE = __name__.rpartition(".")[2]


@contextlib.contextmanager
def domains_in_module_names():
    """Inside, a node of another domain (``ai.onnx.ml``: scikit-learn's Scaler,
    LinearClassifier) names its module with the domain's dots as underscores: onnx2torch
    prefixed the domain as it is, and torch refused the name ("module name can't contain
    '.', got: ai.onnx.ml/Scaler") before any converter ran."""
    from onnx2torch.onnx_graph import OnnxGraph

    require("domains_in_module_names", LIBRARY, VERSION, _MODULE, (OnnxGraph, "generate_node_name"))

    def generate_node_name(node) -> str:
        return (f"{node.domain.replace('.', '_')}/" + (node.name.replace(".", "/") or node.op_type)).lstrip("/")

    with replaced(OnnxGraph, "generate_node_name", staticmethod(generate_node_name)):
        yield
