"""The spec of an ONNX file: its inputs from its graph, given shapes (or a scalar's value)
by name or in order; its external data judged before anything reads it."""

from __future__ import annotations

import os
from pathlib import Path

from ...core.errors import ModelError, UsageError, one_line
from ...core.limits import Entry, check_entries
from ...core.spec import InputSpec, ModelSpec
from ..pt2 import check_dims, check_dtypes

_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64"}


def onnx_spec(path: str, inputs: tuple[InputSpec, ...] = (), dtypes: tuple[str, ...] = ()) -> ModelSpec:
    """A spec for an ONNX file: inputs from its graph. ``inputs`` (the ``--input-shape``s)
    give the shapes, by input name (``images=1,3,640,640``) or in the graph's order: they
    must keep its static dims, and a dynamic dim not given is asked for (a leading batch dim
    alone is 1). A scalar input is given its value (``sr=int64:16000``). ``dtypes``, the
    ``--input-dtype``s, must be the graph's."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"model file '{path}' does not exist", fix="give the path of an .onnx file")
    graph = _onnx_graph(path)
    check_external_data(p, graph)
    weights = {init.name for init in graph.initializer}
    values = [v for v in graph.input if v.name not in weights]
    names = [v.name for v in values]
    given = _given_by_name(path, names, inputs)
    found, asked, wrong = [], [], []
    for value in values:
        tensor = value.type.tensor_type
        dtype = _ONNX_DTYPES.get(tensor.elem_type)
        if dtype is None:
            raise ModelError(f"'{path}': input {value.name} has an ONNX type pteforge cannot feed ({tensor.elem_type})",
                             fix="export the model with float or integer inputs")
        dims = [d.dim_value if d.dim_value > 0 else (d.dim_param or f"dim{i}") for i, d in enumerate(tensor.shape.dim)]
        spec = given.get(value.name)
        if spec is None:
            dynamic = [i for i, d in enumerate(dims) if isinstance(d, str)]
            if dynamic and dynamic != [0]:
                asked.append((value.name, dims))
            found.append(InputSpec(tuple(1 if isinstance(d, str) else d for d in dims), dtype, value.name))
            continue
        if spec.dtype not in (dtype, "float32"):
            wrong.append((value.name, spec.dtype, dtype))
        if not dims and (spec.value is not None or len(spec.shape) == 1):  # a scalar: its value
            found.append(InputSpec((), dtype, value.name, spec.value if spec.value is not None else float(spec.shape[0])))
            continue
        if spec.value is not None:
            raise UsageError(f"--input-shape {value.name}={spec.value:g} for '{path}': input {value.name} is no scalar "
                             f"but a tensor of dims {', '.join(map(str, dims))}", fix="give its shape, e.g. 1,3,224,224")
        check_dims(path, value.name, [(d, d) if isinstance(d, int) else (1, None) for d in dims], spec.shape)
        found.append(InputSpec(spec.shape, dtype, value.name))
    if asked:
        said = "; ".join(f"{name} [{', '.join(map(str, dims))}]" for name, dims in asked)
        example = " ".join(f"--input-shape {name}={','.join(str(d) if isinstance(d, int) else d.upper() for d in dims)}"
                           for name, dims in asked)
        raise UsageError(f"'{path}' has dynamic dims its program needs fixed: {said}",
                         fix=f"give them, e.g. {example} (numbers for the upper-case names)")
    check_dtypes(path, names, found, dtypes)
    _numeric_outputs(path, graph)
    for name, said, dtype in wrong:
        raise UsageError(f"--input-shape {name}={said}:... for '{path}', whose input {name} is {dtype}",
                         fix=f"give {name}={dtype}:... or leave the dtype out: the file says it")
    quantized = "int8" if any(n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx") for n in graph.node) else None
    return ModelSpec(name=p.stem, family="custom", task="custom", inputs=tuple(found),
                     factory="pteforge.models.onnx.build:build_onnx_named", source="onnx", path=str(p.resolve()),
                     quantized=quantized)


def _numeric_outputs(path: str, graph) -> None:
    """Refuse, before any work, an output a program cannot return: text (scikit-learn's
    class labels when it was trained on names), or a sequence or map (its ZipMap)."""
    import onnx

    for value in graph.output:
        kind = value.type.WhichOneof("value")
        if kind == "tensor_type" and value.type.tensor_type.elem_type != onnx.TensorProto.STRING:
            continue
        if kind == "tensor_type":
            raise ModelError(f"'{path}': output {value.name} is text (tensor(string)), which no program returns",
                             fix="export the model with numeric outputs: a scikit-learn classifier trained on class "
                                 "numbers (sklearn.preprocessing.LabelEncoder), their names kept in the app "
                                 "(--labels-file)")
        what = "a list of dictionaries" if kind == "sequence_type" and \
            value.type.sequence_type.elem_type.WhichOneof("value") == "map_type" else f"a {kind.replace('_type', '')}"
        raise ModelError(f"'{path}': output {value.name} is {what}, which no program returns",
                         fix="export the model with tensor outputs; scikit-learn's probabilities as one tensor: "
                             "convert without ZipMap, skl2onnx's to_onnx(model, X, options={'zipmap': False})")


def _onnx_graph(path: str):
    import onnx  # 0.4 s: own.py, which config files import, imports this module

    try:
        return onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:
        raise ModelError(f"'{path}' is not an ONNX model ({one_line(exc, 120)})",
                         fix="give a file written by torch.onnx.export or an ONNX exporter") from None


def check_external_data(path: Path, graph) -> None:
    """An ONNX file's external data judged before ``onnx.load`` reads it: every tensor's
    file inside the model's folder and there, no more tensors, bytes each and bytes in all
    than ``core.limits`` allows. Refused in one line naming the file, the tensor and the limit."""
    from onnx import TensorProto

    folder = Path(os.path.abspath(path)).parent  # where onnx.load looks, a symlinked file's own folder
    entries = []
    for tensor in _graph_tensors(graph):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if not location or os.path.isabs(location) or os.path.normpath(location).split(os.sep)[0] == "..":
            raise ModelError(f"'{path}': tensor {tensor.name}'s external data '{location}' is not a file in the "
                             "model's folder",
                             fix="keep the external data files beside the .onnx file, named relatively")
        where = folder / location
        if not where.is_file():
            raise ModelError(f"'{path}': tensor {tensor.name}'s external data file '{location}' is missing",
                             fix="copy the .onnx file together with its external data files")
        entries.append(Entry(tensor.name, _external_length(info, where)))
    check_entries(path, entries, error=ModelError, part="external tensor")


def _external_length(info: dict[str, str], where: Path) -> int:
    """The bytes an external tensor's entry says ``onnx.load`` will read: its ``length``, or
    the rest of its file after ``offset``."""
    try:
        offset = int(info.get("offset") or 0)
        return int(info["length"]) if info.get("length") else max(where.stat().st_size - offset, 0)
    except ValueError:
        return 0  # onnx.load refuses it in its own words


def _graph_tensors(graph):
    """Every tensor a graph holds: its initializers, sparse ones, and its nodes' attributes,
    subgraphs (an If's branches, a Loop's body) included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g)
            for sub in attr.graphs:
                yield from _graph_tensors(sub)


def _given_by_name(path: str, names: list[str], inputs: tuple[InputSpec, ...]) -> dict[str, InputSpec]:
    """The ``--input-shape``s of a file's inputs: by name, the unnamed ones in the graph's
    order for the inputs not named."""
    named = {i.name: i for i in inputs if i.name}
    unknown = [n for n in named if n not in names]
    if unknown:
        raise UsageError(f"--input-shape {unknown[0]}=...: '{path}' has no input {unknown[0]}",
                         fix=f"its inputs are {', '.join(names)}")
    rest = [n for n in names if n not in named]
    positional = [i for i in inputs if not i.name]
    if positional and len(positional) != len(rest):
        raise UsageError(f"'{path}' has {len(names)} input(s) ({', '.join(names)}); {len(inputs)} --input-shape given",
                         fix="give one --input-shape per input, or name them: --input-shape NAME=1,3,224,224")
    return {**named, **dict(zip(rest, positional))}
