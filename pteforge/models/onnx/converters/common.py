"""What the converters share: reading a node's attributes and constants, making
onnx2torch's result, registering a converter for several versions."""

from __future__ import annotations

import torch
from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription, add_converter
from onnx2torch.utils.common import OnnxMapping, OperationConverterResult, onnx_mapping_from_node


def _missing(op: str, version: int) -> bool:

    return OperationDescription(domain="", operation_type=op, version=version) not in _CONVERTER_REGISTRY


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _constant(graph, name: str):
    """The initializer ``name`` as a tensor; None when absent; raises naming it when it is
    computed at run time."""
    if not name:
        return None
    if name not in graph.initializers:
        raise NotImplementedError(f"input {name} computed at run time (pteforge takes it as a constant)")
    return graph.initializers[name].to_torch()


def _result(module, node, inputs=None):
    mapping = onnx_mapping_from_node(node) if inputs is None else OnnxMapping(inputs=inputs, outputs=node.output_values)
    return OperationConverterResult(torch_module=module, onnx_mapping=mapping)


def _add(op: str, versions, convert) -> None:

    for version in versions:
        if _missing(op, version):
            add_converter(operation_type=op, version=version)(convert)


def _full_bias(convert):
    """onnx2torch's Gemm, with a ``Linear``'s bias of one value (C broadcast over the
    outputs) given one value per output: XNNPACK's linear read N values from a bias of 1."""
    def converter(node, graph):
        result = convert(node, graph)
        linear = result.torch_module
        if isinstance(linear, torch.nn.Linear) and linear.bias is not None and \
                linear.bias.numel() != linear.out_features:
            with torch.no_grad():
                linear.bias = torch.nn.Parameter(linear.bias.expand(linear.out_features).clone(), requires_grad=False)
        return result
    return converter
