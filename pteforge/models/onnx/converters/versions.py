"""Operator versions onnx2torch lacks that mean what an older one it has means, read as
that one (``register_same_meaning``); and the versions its registry files under the wrong number."""

from __future__ import annotations

import onnx.defs
from onnx import helper
from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

from .common import _missing

# Versions whose signature is an older one's but whose meaning changed (Softmax-13 normalizes
# one axis, Softmax-11 the 2-D coerced input): never read as an older version.
CHANGED_MEANING = frozenset({("Softmax", 13), ("LogSoftmax", 13), ("Hardmax", 13)})


def _schemas(op: str) -> dict:
    """ONNX's schemas of ``op`` (default domain), by the version that introduced each."""
    return {s.since_version: s for s in onnx.defs.get_all_schemas_with_history() if s.name == op and s.domain == ""}


def _refile_misfiled_versions() -> None:
    """A converter onnx2torch files under a version that introduced nothing (``Slice`` 9:
    Slice-1 holds from opset 1 to 9, and its lookup asks for 1) filed under the version that did."""
    for description, convert in list(_CONVERTER_REGISTRY.items()):
        if description.domain != "":
            continue
        try:
            since = onnx.defs.get_schema(description.operation_type, description.version, "").since_version
        except onnx.defs.SchemaError:
            continue
        if since != description.version and _missing(description.operation_type, since):
            _CONVERTER_REGISTRY[OperationDescription("", description.operation_type, since)] = convert


def added(newer, older) -> tuple[dict, int] | None:
    """What schema ``newer`` adds to ``older`` when it keeps all of it, under the same names and
    in the same places (attributes, inputs and outputs, optional ones appended): (its new
    attributes with the default that keeps the older meaning, None for none; the older's input
    count); None when it renames, moves or drops something."""
    if (newer.name, newer.since_version) in CHANGED_MEANING and older.since_version < newer.since_version:
        return None
    if not set(older.attributes) <= set(newer.attributes):
        return None
    for new, old in ((newer.inputs, older.inputs), (newer.outputs, older.outputs)):
        if [p.name for p in new[:len(old)]] != [p.name for p in old] or \
                any(p.option.name != "Optional" for p in new[len(old):]):
            return None
    attributes = {name: (helper.get_attribute_value(a.default_value) if a.default_value.type else None)
                  for name, a in newer.attributes.items() if name not in older.attributes}
    return attributes, len(older.inputs)


def register_same_meaning() -> None:
    """Each version of an operator that onnx2torch lacks, read as the newest older version it
    has, when the newer only adds types, or attributes and optional inputs that the node leaves
    at the older meaning (Conv-22, Pad-19 to 25, Reshape-21 to 25, Resize-18 and 19: bfloat16,
    int4 and float8 types; Resize's antialias). A node that uses what was added is refused,
    naming it."""
    ops = {d.operation_type for d in _CONVERTER_REGISTRY if d.domain == ""}
    for op in sorted(ops):
        schemas = _schemas(op)
        for version in sorted(schemas):
            if not _missing(op, version):
                continue
            for older in sorted((v for v in schemas if v < version), reverse=True):
                change = added(schemas[version], schemas[older])
                if change is None:
                    break
                convert = _CONVERTER_REGISTRY.get(OperationDescription("", op, older))
                if convert is not None:
                    _CONVERTER_REGISTRY[OperationDescription("", op, version)] = _as_older(op, version, *change, convert)
                    break


def _as_older(op: str, version: int, attributes: dict, inputs: int, convert):
    def plain(value):
        return value.decode() if isinstance(value, bytes) else value

    def converter(node, graph):
        for name, default in attributes.items():
            value = node.attributes.get(name, default)
            if plain(value) != plain(default):
                raise NotImplementedError(f"{op}-{version} with {name}={plain(value)!r}")
        if any(node.input_values[inputs:]):
            raise NotImplementedError(f"{op}-{version} with its input {inputs + 1} (new in version {version})")
        return convert(node, graph)
    return converter
