"""Run a ``.pte`` whose delegates or kernels this host's runtime lacks, on reference simulators.

The program itself is run: its instructions are read from the file and carried out in
order, as ExecuTorch's runtime would. A kernel call runs the operator's PyTorch
implementation (ATen's for ``aten::``, ExecuTorch's reference implementations for
``cortex_m::`` and ``quantized_decomposed::``); a delegate call hands the file's own
delegate payload to the target's reference simulator (:class:`Simulator`), for example
Arm's TOSA reference model for a ``TOSABackend`` payload. What ran is said in
:attr:`Simulation.method`, which the record keeps as ``verification.method``.

This is proof of the program's numerics, not of a device: memory planning, the target's
own kernels and its timing are not exercised. The status it gives is SIMULATED, never
VERIFIED.
"""

from __future__ import annotations

import dataclasses
import operator
import time
from dataclasses import dataclass
from typing import Any, Callable

from ...runtime.host import Host, load_runtime
from .cmsis import FASTER

# ExecuTorch's ScalarType numbering is c10's.
_DTYPES = None


def _dtype(code: int):
    global _DTYPES
    if _DTYPES is None:
        import torch

        _DTYPES = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16,
                   6: torch.float32, 7: torch.float64, 8: torch.complex32, 9: torch.complex64, 10: torch.complex128,
                   11: torch.bool, 15: torch.bfloat16}  # complex: a spectrogram's FFT on the CPU beside the NPU
    try:
        return _DTYPES[code]
    except KeyError:
        raise SimulationError(f"the program holds a tensor of ScalarType {code}, which the simulation does not take") from None


class SimulationError(RuntimeError):
    """The program could not be carried out on the simulator: the row fails with this line."""

    plain = True  # errors.one_line: the message names the cause, no type before it


@dataclass
class Simulator:
    """Runs one delegate's payloads: ``run(payload, inputs, outputs)`` takes (tensor, dim
    order) per input and (sizes, dim order) per output and returns the output tensors;
    ``inputs(payload)`` says how many of a delegate call's arguments are its inputs."""

    delegate: str  # the runtime id it stands in for, e.g. "TOSABackend"
    what: str  # how the method names it, e.g. "Arm's TOSA reference model (tosa-tools 2026.5.0)"
    run: Callable[[bytes, list, list], list]
    inputs: Callable[[bytes], int]
    note: str = ""  # what else the method must say, e.g. what of the payload it did not run
    takes: Callable[[bytes], bool] = lambda payload: True  # whether it can run this payload at all


@dataclass
class Simulation:
    outputs: list[list]  # per input list, the program's outputs
    method: str = ""  # what ran it (describe)


# The program's own scalar operations (symbolic sizes), ExecuTorch's executorch_prim:: namespace.
_PRIM: dict[str, Callable[..., Any]] = {
    "add.Scalar": operator.add, "sub.Scalar": operator.sub, "mul.Scalar": operator.mul,
    "floordiv.Scalar": operator.floordiv, "truediv.Scalar": operator.truediv, "mod.Scalar": operator.mod,
    "mod.int": operator.mod, "eq.Scalar": operator.eq, "gt.Scalar": operator.gt, "lt.Scalar": operator.lt,
    "ge.Scalar": operator.ge, "le.Scalar": operator.le, "neg.Scalar": operator.neg,
    "sym_float.Scalar": float, "sym_max.Scalar": max, "sym_min.Scalar": min,
}


def _reference_kernels() -> None:
    """Register the PyTorch implementations of ExecuTorch's own operator namespaces."""
    import executorch.backends.cortex_m.passes.cortex_m_pass_manager  # noqa: F401 - cortex_m:: (in the order it imports them)
    import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401 - quantized_decomposed:: out variants


def _overload(name: str, overload: str):
    import torch

    namespace, op = name.split("::", 1)
    try:
        packet = getattr(getattr(torch.ops, namespace), op)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        raise SimulationError(f"no PyTorch implementation of {name}.{overload or 'default'} to simulate it with") from None


def missing_kernels(operators: list[str]) -> list[str]:
    """The program's operators (``ns::op.overload``) the simulation has no implementation of."""
    _reference_kernels()
    missing = []
    for full in dict.fromkeys(operators):
        name, _, overload = full.partition(".")
        if name.startswith("executorch_prim::"):
            if name != "executorch_prim::et_view" and f"{name.split('::')[1]}.{overload}" not in _PRIM:
                missing.append(full)
            continue
        try:
            _overload(name, overload)
        except SimulationError:
            missing.append(full)
    return missing


class _Interpreter:
    """One method of a deserialized program, carried out instruction by instruction."""

    def __init__(self, program, simulators: dict[str, Simulator], host_kernels: frozenset = frozenset(),
                 runtime=None, method: str = "forward"):
        plans = [p for p in program.execution_plan if p.name == method]
        if not plans:
            raise SimulationError(f"the program has no method '{method}'")
        self.program, self.plan, self.simulators = program, plans[0], simulators
        # "aten::add.out": run by this host's ExecuTorch kernel, in ``runtime`` (host.load_runtime())
        self.host_kernels, self.runtime = (host_kernels if runtime is not None else frozenset()), runtime
        self.on_host: dict[tuple, tuple] = {}  # (op index, arguments) -> (program, method, inputs, outputs)
        self.ran: set[str] = set()  # who ran the kernel calls: "host", or the namespace PyTorch ran
        self.calls: dict[str, int] = {}
        self.ops = [(o.name, o.overload) for o in self.plan.operators]
        self.constants: list[Any] = [None] * len(self.plan.values)  # a constant tensor, or None
        for i, v in enumerate(self.plan.values):
            if type(v.val).__name__ == "Tensor" and v.val.data_buffer_idx > 0:
                self.constants[i] = self._constant(v.val)
        self.planned = self._planned()

    def _constant(self, t):
        import torch

        try:
            storage = self.program.constant_buffer[t.data_buffer_idx].storage
        except IndexError:
            raise SimulationError(f"a constant tensor points at buffer {t.data_buffer_idx}, which the file does not have") \
                from None
        dtype = _dtype(_code(t.scalar_type))
        shape = [t.sizes[d] for d in t.dim_order]
        count = 1
        for s in shape:
            count *= s
        flat = torch.frombuffer(bytearray(storage), dtype=dtype) if count else torch.empty(0, dtype=dtype)
        if flat.numel() < count:
            raise SimulationError(f"a constant tensor of {count} values has {flat.numel()} in the file: it is damaged")
        return _from_dim_order(flat[:count].reshape(shape), list(t.dim_order))

    def _planned(self) -> list:
        """Each planned tensor as a view of its memory arena, where the program's memory plan
        puts it: a view the program elides (an alias of another value's memory) is seen as
        ExecuTorch's runtime sees it, and so is memory the plan reuses."""
        import torch

        arenas = [torch.zeros(int(size), dtype=torch.uint8) for size in self.plan.non_const_buffer_sizes]
        planned = [None] * len(self.plan.values)
        for i, v in enumerate(self.plan.values):
            t = v.val
            if type(t).__name__ != "Tensor" or t.allocation_info is None or t.data_buffer_idx > 0:
                continue
            info = t.allocation_info
            offset = info.memory_offset_low + (info.memory_offset_high << 32)
            dtype = _dtype(_code(t.scalar_type))
            count = 1
            for d in t.sizes:
                count *= d
            size = count * torch.empty(0, dtype=dtype).element_size()
            if info.memory_id >= len(arenas) or offset + size > arenas[info.memory_id].numel():
                raise SimulationError(f"a tensor is planned outside its memory arena ({info.memory_id}, offset {offset}): "
                                      "the file is damaged")
            stored = arenas[info.memory_id][offset:offset + size].view(dtype)
            planned[i] = _from_dim_order(stored.reshape([t.sizes[d] for d in t.dim_order]), list(t.dim_order))
        return planned

    def _empty(self, i: int):
        import torch

        t = self.plan.values[i].val
        return torch.empty(list(t.sizes), dtype=_dtype(_code(t.scalar_type)))

    def run(self, inputs: list) -> list:
        if len(inputs) != len(self.plan.inputs):
            raise SimulationError(f"the program takes {len(self.plan.inputs)} inputs, it was given {len(inputs)}")
        values: list = [c if c is not None else p for c, p in zip(self.constants, self.planned)]
        for v, x in zip(self.plan.inputs, inputs):
            values[v] = _fitted(values[v], x) if values[v] is not None else x
        for i, v in enumerate(self.plan.values):
            if values[i] is None and type(v.val).__name__ != "Tensor":
                values[i] = self._scalar(i)
        instructions = self.plan.chains[0].instructions
        pc = 0
        while pc < len(instructions):
            step = instructions[pc].instr_args
            kind = type(step).__name__
            pc += 1
            if kind == "KernelCall":
                self._kernel(step, values)
            elif kind == "DelegateCall":
                self._delegate(step, values)
            elif kind == "MoveCall":
                values[step.move_to] = values[step.move_from]
            elif kind == "JumpFalseCall":
                if not bool(values[step.cond_value_index]):
                    pc = step.destination_instruction
            elif kind != "FreeCall":
                raise SimulationError(f"the program has a {kind} instruction, which the simulation does not take")
        return [values[o] for o in self.plan.outputs]

    def _scalar(self, i: int):
        val = self.plan.values[i].val
        kind = type(val).__name__
        if kind == "Int":
            return val.int_val
        if kind == "Double":
            return val.double_val
        if kind == "Bool":
            return val.bool_val
        if kind == "String":
            return val.string_val
        if kind == "Null":
            return None
        return val  # lists: resolved per argument, where their items are values

    def _argument(self, index: int, values: list, kind: str):
        import torch

        value = values[index]
        raw = type(self.plan.values[index].val).__name__
        if raw in ("IntList", "TensorList"):  # their items are values
            return [values[j] for j in self.plan.values[index].val.items]
        if raw == "OptionalTensorList":
            return [None if j == -1 else values[j] for j in self.plan.values[index].val.items]
        if raw in ("BoolList", "DoubleList"):
            return list(self.plan.values[index].val.items)
        if raw == "Int" and "ScalarType" in kind:
            return _dtype(value)
        if raw == "Int" and "MemoryFormat" in kind:
            return [torch.contiguous_format, torch.preserve_format, torch.channels_last,
                    torch.channels_last_3d][value] if value is not None else None
        if raw == "Int" and "Layout" in kind:
            return torch.strided
        return value

    def _kernel(self, step, values: list) -> None:
        name, overload = self.ops[step.op_index]
        args = list(step.args)
        if name.startswith("executorch_prim::"):
            op = name.split("::", 1)[1]
            if op == "et_view":  # a view of its input, sized as the program says
                size = self._argument(args[1], values, "int[]")
                values[args[-1]] = values[args[0]].reshape(size)
                return
            fn = _PRIM.get(f"{op}.{overload}")
            if fn is None:
                raise SimulationError(f"the program calls {name}.{overload}, which the simulation does not take")
            values[args[-1]] = fn(*(values[a] for a in args[:-1]))
            return
        op = _overload(name, overload)
        if f"{name}.{overload}" in self.host_kernels:
            self._host_kernel(step, op._schema, values)
        else:
            self._pytorch_kernel(name, overload, op, args, values)

    def _pytorch_kernel(self, name: str, overload: str, op, args: list, values: list) -> None:
        """One kernel call on the operator's PyTorch implementation: its out arguments are the
        program's own tensors, written in place."""
        schema = op._schema
        self.ran.add(name.split("::")[0])
        given, positional, keywords, outs = args[:len(schema.arguments)], [], {}, []
        for a, index in zip(schema.arguments, given):
            written = a.alias_info is not None and a.alias_info.is_write
            if written and values[index] is None:
                values[index] = self._empty(index)
            value = self._argument(index, values, str(a.type))
            if written:
                outs.append((index, value))
            if a.kwarg_only:
                keywords[a.name] = value
            else:
                positional.append(value)
        try:
            try:
                result = op(*positional, **keywords)
            except NotImplementedError as exc:
                if "with arguments from the" not in str(exc):
                    raise
                # an out variant with no kernel of its own (cortex_m::): the functional one, copied out
                functional = FASTER.get(name) or _overload(name, "default")
                names = {o[0] for o in outs}
                result = functional(*[v for v, i in zip(positional, given) if i not in names],
                                    **{k: v for k, v in keywords.items() if not any(v is o[1] for o in outs)})
                for (index, out), r in zip(outs, result if isinstance(result, (tuple, list)) else [result]):
                    values[index] = _fitted(out, r)
                result = [values[i] for i, _ in outs] if len(outs) > 1 else values[outs[0][0]]
        except SimulationError:
            raise
        except Exception as exc:  # noqa: BLE001 - the kernel's refusal, said with what it was given
            import torch

            dtypes = sorted({str(v.dtype).removeprefix("torch.") for v, i in zip(positional, given)
                             if isinstance(v, torch.Tensor) and i not in {o[0] for o in outs}})
            refused = str(exc).strip().splitlines()[0][:160]
            raise SimulationError(
                f"the program's {name}.{overload} failed on its {'/'.join(dtypes) or 'scalar'} inputs in PyTorch ({refused})"
                + ("; this host's ExecuTorch has no kernel for it to try instead" if name.startswith("aten::") else "")
                + ("; an int8 tensor given to a float operator means the lowering left it on quantized values, "
                   "which no kernel computes right" if "int8" in dtypes and name.startswith("aten::") else "")) from None
        returns = args[len(schema.arguments):]
        results = result if isinstance(result, (tuple, list)) and len(returns) > 1 else [result]
        for index, r in zip(returns, results):
            values[index] = r

    def _host_kernel(self, step, schema, values: list) -> None:
        """Run one kernel call on this host's ExecuTorch kernel (the portable one the target
        links too), as a program of that one instruction."""
        key = (step.op_index, tuple(step.args))
        if key not in self.on_host:
            self.on_host[key] = self._one_instruction(step, schema)
        _, method, inputs, outputs = self.on_host[key]
        try:
            result = method.execute([values[i].contiguous() for i in inputs])
        except Exception as exc:  # noqa: BLE001 - the kernel's refusal, said with what it was given
            name, overload = self.ops[step.op_index]
            def typed(indices):
                return ", ".join(f"{str(values[i].dtype).removeprefix('torch.')}{list(values[i].shape)}" for i in indices)

            raise SimulationError(f"this host's ExecuTorch kernel {name}.{overload} refused the program's inputs "
                                  f"({typed(inputs)}) and output ({typed(outputs)}): {str(exc).splitlines()[0][:160]}") from None
        for i, t in zip(outputs, result):
            values[i] = _fitted(values[i], t) if values[i] is not None else t.clone()
        self.ran.add("host")

    def _one_instruction(self, step, schema) -> tuple:
        import torch
        from executorch.exir import schema as et
        from executorch.exir._serialize._program import PTEFile, serialize_pte_binary

        written: list[int] = []  # the tensors it writes, those of a list of tensors (split's out) one by one
        for a, index in zip(schema.arguments, step.args):
            if a.alias_info is not None and a.alias_info.is_write:
                val = self.plan.values[index].val
                written += list(val.items) if type(val).__name__ == "TensorList" else [index]
        written += [i for i in step.args[len(schema.arguments):] if type(self.plan.values[i].val).__name__ == "Tensor"]
        remap: dict[int, int] = {}
        values: list = []
        name, overload = self.ops[step.op_index]
        # a copy into another dim order writes the order its program says (the kernel checks
        # it); every other tensor is in its plain one
        relaid = set(written) if name.startswith("dim_order_ops::") else set()
        buffers, inputs, cursor = [et.Buffer(storage=b"")], [], 0

        def visit(i: int) -> int:
            nonlocal cursor
            if i in remap:
                return remap[i]
            val = self.plan.values[i].val
            kind = type(val).__name__
            if kind in ("IntList", "TensorList"):
                val = type(val)(items=[visit(j) for j in val.items])
            elif kind == "OptionalTensorList":
                val = type(val)(items=[-1 if j == -1 else visit(j) for j in val.items])
            elif kind == "Tensor" and val.data_buffer_idx > 0:
                # every tensor of the one instruction in its plain dim order: the values are
                # the same, and a kernel that wants its tensors in one order gets it
                data = self.constants[i].contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                buffers.append(et.Buffer(storage=data))
                val = dataclasses.replace(val, data_buffer_idx=len(buffers) - 1, allocation_info=None,
                                          dim_order=list(range(len(val.sizes))))
            elif kind == "Tensor":
                size = -(-_nbytes(val) // 16) * 16
                val = dataclasses.replace(val, allocation_info=et.AllocationDetails(
                    memory_id=1, memory_offset_low=cursor, memory_offset_high=0),
                    dim_order=list(val.dim_order) if i in relaid else list(range(len(val.sizes))))
                cursor += size
            remap[i] = len(values)
            values.append(et.EValue(val=val))
            if kind == "Tensor" and val.data_buffer_idx == 0 and i not in written:
                inputs.append(i)
            return remap[i]

        args = [visit(i) for i in step.args]
        outputs = list(dict.fromkeys(written))
        plan = et.ExecutionPlan(
            name="forward", container_meta_type=et.ContainerMetadata("", ""), values=values,
            inputs=[remap[i] for i in inputs], outputs=[remap[i] for i in outputs],
            chains=[et.Chain(inputs=[remap[i] for i in inputs], outputs=[remap[i] for i in outputs],
                             instructions=[et.Instruction(et.KernelCall(op_index=0, args=args))], stacktrace=None)],
            operators=[et.Operator(name=name, overload=overload)], delegates=[], non_const_buffer_sizes=[0, cursor])
        program = et.Program(version=0, execution_plan=[plan], constant_buffer=buffers, backend_delegate_data=[],
                             segments=[], constant_segment=et.SubsegmentOffsets(segment_index=0, offsets=[]))
        loaded = self.runtime.load_program(bytes(serialize_pte_binary(PTEFile(program=program))))
        return loaded, loaded.load_method("forward"), inputs, outputs  # the method lives as long as its program

    def _delegate(self, step, values: list) -> None:
        delegate = self.plan.delegates[step.delegate_index]
        sim = self.simulators.get(delegate.id)
        if sim is None:
            raise SimulationError(f"no simulator for the program's {delegate.id} payload")
        where = delegate.processed
        try:
            payload = bytes(self.program.backend_delegate_data[where.index].data)
        except IndexError:
            raise SimulationError(f"the {delegate.id} payload {where.index} is not in the file: it is damaged") from None
        # its arguments: the payload's inputs, then its outputs
        taken = sim.inputs(payload)
        inputs, outputs = step.args[:taken], step.args[taken:]
        out = sim.run(payload, [(values[a], _dim_order_of(self.plan.values[a].val)) for a in inputs],
                      [(list(self.plan.values[a].val.sizes), list(self.plan.values[a].val.dim_order)) for a in outputs])
        if len(out) != len(outputs):
            raise SimulationError(f"{sim.what} returned {len(out)} outputs where the program expects {len(outputs)}")
        for a, t in zip(outputs, out):
            values[a] = _fitted(values[a], t) if values[a] is not None else t
        self.calls[delegate.id] = self.calls.get(delegate.id, 0) + 1


def _nbytes(t) -> int:
    import torch

    count = 1
    for d in t.sizes:
        count *= d
    return count * torch.empty(0, dtype=_dtype(_code(t.scalar_type))).element_size()


def _code(scalar_type) -> int:
    return scalar_type.value if hasattr(scalar_type, "value") else int(scalar_type)


def _dim_order_of(t) -> list[int] | None:
    return list(t.dim_order) if type(t).__name__ == "Tensor" else None


def _from_dim_order(stored, dim_order: list[int]):
    """A tensor whose bytes are laid out in ``dim_order``, as a tensor of its logical shape."""
    inverse = [dim_order.index(i) for i in range(len(dim_order))]
    return stored.permute(inverse) if dim_order != sorted(dim_order) else stored


def to_dim_order(t, dim_order: list[int] | None):
    """``t``'s values laid out in ``dim_order`` (what a delegate reads from memory)."""
    if dim_order and dim_order != sorted(dim_order):
        return t.permute(dim_order).contiguous()
    return t.contiguous()


def from_dim_order(flat, sizes: list[int], dim_order: list[int]):
    return _from_dim_order(flat.reshape([sizes[d] for d in dim_order]), dim_order).contiguous()


def _fitted(out, result):
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)


def deserialize(data: bytes):
    from executorch.exir._serialize._program import deserialize_pte_binary

    try:
        pte = deserialize_pte_binary(data)
    except Exception as exc:  # noqa: BLE001 - any parse error: a damaged file
        raise SimulationError(f"the file is not a readable ExecuTorch program ({str(exc).splitlines()[0][:120]})") from None
    return getattr(pte, "program", pte)


def simulate(data: bytes, inputs: list[list], simulators: dict[str, Simulator], host_kernels=frozenset(),
             progress=None, runtime=None) -> Simulation:
    """Carry out the program ``data`` once per input list, with ``simulators`` standing in
    for its delegates, ``runtime``'s ExecuTorch kernels (``host.load_runtime()``) for
    ``host_kernels`` and PyTorch's implementations for the other kernels."""
    import torch

    _reference_kernels()
    program = deserialize(data)
    interp = _Interpreter(program, simulators, frozenset(host_kernels), runtime)
    outputs = []
    with torch.no_grad():
        for i, x in enumerate(inputs, 1):
            if progress:
                progress(i, len(inputs))
            outputs.append([t.clone() for t in interp.run(list(x)) if isinstance(t, torch.Tensor)])
    return Simulation(outputs=outputs, method=describe(interp, simulators))


def describe(interp: _Interpreter, simulators: dict[str, Simulator]) -> str:
    kernels = {"host": "this host's ExecuTorch kernels", "aten": "PyTorch's ATen",
               "cortex_m": "ExecuTorch's cortex_m:: reference implementations in PyTorch",
               "quantized_decomposed": "PyTorch's quantized_decomposed:: ops"}
    namespaces = sorted(interp.ran, key=lambda n: (n != "host", n))
    parts = []
    for delegate, calls in interp.calls.items():
        sim = simulators[delegate]
        many = len({d.processed.index for d in interp.plan.delegates if d.id == delegate}) > 1
        parts.append(f"{sim.what} ran the file's {delegate} payload{'s' if many else ''}"
                     + (f" ({sim.note})" if sim.note else ""))
    outside = ", ".join(kernels.get(n, f"PyTorch's {n}::") for n in namespaces)
    if outside:
        parts.append(("its other" if parts else "the program's") + f" instructions ran on {outside}")
    return "; ".join(parts)


def simulators_for(chain: list, program) -> dict[str, Simulator] | None:
    """The stand-ins that run ``program`` (a deserialized ExecuTorch program of ``chain``)
    here, or None when the chain's first backend has no reference simulator, a payload has
    no stand-in that takes it, or PyTorch lacks one of its kernels."""
    if not chain or not chain[0].simulated_on:
        return None
    found = {s.delegate: s for backend in chain for s in backend.simulators()}
    for plan in program.execution_plan:
        for d in plan.delegates:
            sim = found.get(d.id)
            payload = program.backend_delegate_data[d.processed.index].data \
                if d.processed.index < len(program.backend_delegate_data) else b""
            if sim is None or not sim.takes(bytes(payload)):
                return None
    kernels = [f"{o.name}.{o.overload}" if o.overload else o.name for p in program.execution_plan for o in p.operators]
    return None if missing_kernels(kernels) else found


def delegate_payloads(program, delegate: str | None) -> list[bytes]:
    """The payloads of ``delegate`` held in a program (inline, as Arm's backends keep them)."""
    out = []
    for plan in program.execution_plan:
        for d in plan.delegates:
            if d.id == delegate and d.processed.index < len(program.backend_delegate_data):
                out.append(bytes(program.backend_delegate_data[d.processed.index].data))
    return out


def simulate_request(req: dict) -> dict:
    """Run a program this runtime cannot on the reference simulator of the backends that made
    it, in the runtime's child (``IsolatedRuntime.call``); ``{"simulated": False}`` when they
    have none that takes it."""
    import torch

    from .. import default_registry

    with open(req["path"], "rb") as f:
        data = f.read()
    registry = default_registry()
    chain = [registry.get(name) for name in req["backends"] if name in registry]
    simulators = simulators_for(chain, deserialize(data))
    if simulators is None:
        return {"simulated": False}
    batches = torch.load(req["inputs"], weights_only=True)
    t0 = time.perf_counter()
    done = simulate(data, batches, simulators, Host.here().operators, runtime=load_runtime())
    torch.save(done.outputs, req["outputs"])
    seconds = time.perf_counter() - t0
    return {"simulated": True, "method": done.method, "simulator": chain[0].simulated_on, "seconds": seconds}
