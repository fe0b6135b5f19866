"""Facts read from a ``.pte`` file itself (no runtime): delegates, operators and the
inputs and outputs of its ``forward``.

Used to validate files that have no manifest entry, to prove that an artifact
contains the delegates its target names, and to tell an app what to feed a program and
what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


# ExecuTorch ScalarType codes -> torch dtype names
DTYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
          7: "float64", 11: "bool", 15: "bfloat16"}
_SCALARS = {"Int": "int", "Double": "float", "Bool": "bool", "String": "str", "Null": "none"}


@dataclass(frozen=True)
class PteFacts:
    delegates: list[str]
    operators: list[str]
    io: dict | None = None  # program_io of its forward


def read_pte(path_or_bytes) -> PteFacts:
    from executorch.exir._serialize._program import deserialize_pte_binary

    data = Path(path_or_bytes).read_bytes() if not isinstance(path_or_bytes, (bytes, bytearray)) else bytes(path_or_bytes)
    pte = deserialize_pte_binary(data)
    program = getattr(pte, "program", pte)
    return PteFacts(program_delegates(program), program_operators(program), program_io(program))


def program_delegates(program) -> list[str]:
    """Delegate ids recorded in a deserialized/serialized ExecuTorch program, in order."""
    ids: list[str] = []
    for plan in program.execution_plan:
        ids.extend(d.id for d in plan.delegates)
    return ids


def program_operators(program) -> list[str]:
    """The operators a (de)serialized ExecuTorch program calls, as ``name.overload``, in order."""
    ops: list[str] = []
    for plan in program.execution_plan:
        ops.extend(f"{op.name}.{op.overload}" if op.overload else op.name for op in plan.operators)
    return ops


def program_io(program, exported=None, method: str = "forward", inputs_from=None,
               names: list[str] | None = None) -> dict | None:
    """``{"inputs": [...], "outputs": [...]}`` of ``method`` in a (de)serialized program,
    in the order the runtime takes and returns them: a tensor as ``{"name", "shape",
    "dtype"}`` (``"dynamic": true`` when its shape may be smaller than ``shape``, which
    is then the largest), any other value as ``{"name", "type"}`` (``int``, ``float``,
    ``bool``). Names come from ``exported``, the ExportedProgram the program was made
    from: its inputs' argument names, and each output's place in what the model returns
    (a dict's key, a tuple's index, joined with dots: ``boxes``, ``1.0``; ``output`` for
    a lone tensor); without it, or when they do not line up, their positions.
    ``inputs_from``: the program the inputs are named from instead (the capture, whose names
    are the model's: quantizing and fp16 export it again as ``args_0``). ``names``: the
    inputs' names as a file wrote them (an ONNX file's ``serving_default_x:0``, which a
    Python argument cannot be), used where there is one per input. None when the program
    has no such method."""
    plan = next((p for p in program.execution_plan if p.name == method), None)
    if plan is None:
        return None
    inputs = _names(inputs_from if inputs_from is not None else exported, "inputs", len(plan.inputs))
    if names is not None and len(names) == len(plan.inputs) and all(names) and len(set(names)) == len(names):
        inputs = list(names)
    outputs = _names(exported, "outputs", len(plan.outputs))
    return {"inputs": [_value(plan.values[i].val, name) for i, name in zip(plan.inputs, inputs)],
            "outputs": [_value(plan.values[i].val, name) for i, name in zip(plan.outputs, outputs)]}


def _value(value, name: str) -> dict:
    kind = type(value).__name__
    if kind != "Tensor":
        return {"name": name, "type": _SCALARS.get(kind, kind)}
    code = int(value.scalar_type)
    dtype = DTYPES.get(code, getattr(value.scalar_type, "name", str(code)).lower())
    described = {"name": name, "shape": list(value.sizes), "dtype": dtype}
    if int(value.shape_dynamism) != 0:  # TensorShapeDynamism.STATIC
        described["dynamic"] = True
    return described


def _names(exported, side: str, count: int) -> list[str]:
    """The names of ``count`` inputs or outputs (see ``program_io``), or their positions."""
    names = None
    try:
        if exported is not None and side == "inputs":
            names = list(exported.graph_signature.user_inputs)  # torch.export's: lower case ("X" is "x")
            given = exported.module_call_graph[0].signature.forward_arg_names
            names = list(given) if len(given) == len(names) else names  # forward's own, as the author wrote them
        elif exported is not None:
            names = output_names(exported)
    except Exception:  # noqa: BLE001 - a program without a signature or spec: positions
        names = None
    if names is None or len(names) != count or len(set(names)) != count:
        return [str(i) for i in range(count)]
    return [str(n) for n in names]


def output_names(exported) -> list[str] | None:
    """The name of each value ``exported`` returns that is not a constant (an ExecuTorch
    program returns those only): its place in the model's output, a dict's key, a
    tuple's index or a field's name joined with dots (``boxes``, ``1.0``), ``output``
    for a lone value. None when the output's structure is not known."""
    from torch.export.graph_signature import ConstantArgument, OutputKind
    from torch.utils import _pytree as pytree

    spec = exported.call_spec.out_spec
    if spec is None:
        return None
    paths, _ = pytree.tree_flatten_with_path(pytree.tree_unflatten(list(range(spec.num_leaves)), spec))
    returned = [s for s in exported.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    if len(returned) != len(paths):
        return None

    def part(key) -> str:
        for attr in ("key", "idx", "name"):  # MappingKey, SequenceKey, GetAttrKey
            if hasattr(key, attr):
                return str(getattr(key, attr))
        return str(key)

    return [".".join(part(k) for k in path) or "output"
            for (path, _), s in zip(paths, returned) if not isinstance(s.arg, ConstantArgument)]
