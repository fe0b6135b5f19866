from __future__ import annotations

from ..core.spec import Precision
from .base import Backend, Docs


class CortexM(Backend):
    name = "cortex-m"
    cost = 0.55
    order = 160
    fork_server_imports = ("executorch.backends.arm._passes", "executorch.backends.cortex_m.quantizer.quantizer")
    title = "Arm Cortex-M (CMSIS-NN)"
    aliases = ("cortex_m", "cmsis-nn")
    runtime_name = None  # no delegate: int8 ops are rewritten to cortex_m:: kernels
    ops_namespace = "cortex_m"
    platforms = ("embedded",)
    hardware = "CPU (MCU)"
    use_case = "int8 inference on Cortex-M microcontrollers without an NPU (CMSIS-NN kernels)"
    description = "Arm Cortex-M CPU, CMSIS-NN (int8)"
    precisions = (Precision.INT8,)
    default_precision = Precision.INT8
    docs = Docs(
        overview=(
            "Not a delegate: after the Cortex-M quantizer, ExecuTorch's Cortex-M passes rewrite "
            "quantized operators into cortex_m:: kernels backed by CMSIS-NN."
        ),
        features=("int8 (Cortex-M quantizer).", "CMSIS-NN kernels with MVE on Cortex-M55/M85."),
        target_requirements=("A Cortex-M CPU (M55 by default) and the bare-metal ExecuTorch runtime.",),
        development_requirements=("Nothing beyond the executorch pip package.",),
        cmake_targets=("cortex_m_kernels", "cortex_m_ops_lib"),
        build_flags=("-DEXECUTORCH_BUILD_CORTEX_M=ON",),
        prebuilt="Not prebuilt: cross-compile the bare-metal runtime.",
    )
    code_sample = """from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
from executorch.exir import to_edge
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
# CMSIS-NN convolves NHWC: the quantizer takes only channels-last convolutions
model = model.to(memory_format=torch.channels_last)
example_inputs = tuple(x.to(memory_format=torch.channels_last) for x in example_inputs)
prepared = prepare_pt2e(torch.export.export(model, example_inputs).module(check_guards=False), CortexMQuantizer())
prepared(*example_inputs)  # calibrate on real inputs
exported = torch.export.export(convert_pt2e(prepared), example_inputs)
edge = to_edge(exported, compile_config=cortex_m_edge_compile_config())
edge._edge_programs["forward"] = CortexMPassManager(edge.exported_program()).transform()"""

    # no delegate: its cortex_m:: kernels have reference implementations in ExecuTorch
    simulated_on = "ExecuTorch's cortex_m:: reference implementations"

    def partitioners(self, precision):
        return []

    def quantizer(self, precision):
        from executorch.backends.arm._passes import RewriteInplaceArithmeticPass
        from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

        from ..patches.executorch_patches import matmuls_of_constants_left_alone

        quantizer = CortexMQuantizer()
        transform = quantizer.transform_for_annotation

        def transform_for_annotation(model):
            # ``y.mul_(0.5)`` as ``mul``, as Arm's own quantizers see it: Cortex-M's passes
            # make scalars tensors for ``mul`` only, and its ``mul_`` then had one input's
            # quantization parameters ("AtenToCortexMPass failed: KeyError: 1")
            model = RewriteInplaceArithmeticPass(tfa_pass=True).call(model).graph_module
            with matmuls_of_constants_left_alone():
                return transform(model)

        quantizer.transform_for_annotation = transform_for_annotation
        return quantizer

    def plan(self, precision):
        plan = super().plan(precision)
        plan.for_quantizer = channels_last_inside
        return plan

    def lower(self, exported, plan, rest):
        from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
        from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
        from executorch.exir import to_edge, to_edge_transform_and_lower

        from ..patches.executorch_patches import activations_fuse_into_a_wider_range, quantized_linears_read_by_matmuls

        config = cortex_m_edge_compile_config()
        edge = (
            to_edge_transform_and_lower(exported, partitioner=rest, compile_config=config)
            if rest
            else to_edge(exported, compile_config=config)
        )
        # Cortex-M rewrites operators in place instead of delegating; this is how
        # ExecuTorch's own Cortex-M flow applies its pass manager to an edge program.
        # a ReLU that shares its range; a linear read by a batch matmul (see the patches)
        with activations_fuse_into_a_wider_range(), quantized_linears_read_by_matmuls():
            edge._edge_programs["forward"] = CortexMPassManager(edge.exported_program()).transform()
        floats_on_quantized_values(edge.exported_program())
        constants_filled_in_their_quantization(edge.exported_program())
        in_elementary_operators(edge.exported_program())
        contiguous_before_views(edge.exported_program())
        return _serialized_with_torchs_dim_orders(edge)


def channels_last_inside(module, example: tuple):
    """``module`` with its 4-D activations laid out NHWC, its inputs and outputs as they were.

    CMSIS-NN's convolutions read NHWC, and ExecuTorch 1.5.1's Cortex-M quantizer annotates
    a convolution only where its tensors are channels-last (``CortexMConv2DCheck``). On a
    program captured NCHW it quantized only those over 1×1 pixels: mobilenet_v3_small's
    Cortex-M program kept 34 of its 52 convolutions in fp32, squeezenet1_1's all 26.
    ExecuTorch's own compiler (``aot_arm_compiler``) makes the model and its inputs
    channels-last, which changes what the program's caller must hand it. Here each 4-D
    floating-point input is made channels-last inside the program (a
    ``_clone_dim_order``, a portable kernel), and each 4-D output contiguous again on its
    way out: the caller's tensors are the capture's. Its 4-D weights are made channels-last
    as ExecuTorch's compiler makes them. Then the module is exported again, so that every
    value's fake tensor has the strides the quantizer's checks read."""
    import torch
    from torch.utils import _pytree as pytree

    graph = module.graph
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    if not any(_nchw(n) for n in inputs) and not any(w.dim() == 4 for w in module.state_dict().values()):
        return module  # nothing 4-D comes in, and nothing 4-D is convolved
    for node in inputs:
        if _nchw(node):
            with graph.inserting_after(node):
                nhwc = graph.call_function(torch.ops.aten.clone.default, (node,),
                                           {"memory_format": torch.channels_last})
            node.replace_all_uses_with(nhwc, delete_user_cb=lambda user, made=nhwc: user is not made)
    output = next(n for n in graph.nodes if n.op == "output")

    def contiguous(value):
        if isinstance(value, torch.fx.Node) and _nchw(value):
            with graph.inserting_before(output):
                return graph.call_function(torch.ops.aten.clone.default, (value,),
                                           {"memory_format": torch.contiguous_format})
        return value

    output.args = (pytree.tree_map(contiguous, output.args[0]),)
    module.recompile()
    # 4-D weights too: a convolution's output is channels-last where its input or its weight
    # is, and a model's own .contiguous() (ShuffleNet's channel shuffle) gives NCHW inputs.
    # Only those: Module.to(memory_format=...) also takes 5-D ones, which have no such layout.
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.dim() == 4:
            tensor.data = tensor.data.contiguous(memory_format=torch.channels_last)
    return torch.export.export(module, example).module(check_guards=False)


def _serialized_with_torchs_dim_orders(edge):
    """``edge``, whose ``to_executorch`` gives each tensor of one channel (or one pixel) the
    dim order torch reads from it (patch ``ambiguous_strides_read_as_torch_does``): NHWC
    inside the program makes such tensors, whose strides fit several orders."""
    import functools

    from ..patches.executorch_patches import ambiguous_strides_read_as_torch_does

    serialize = edge.to_executorch

    @functools.wraps(serialize)
    def to_executorch(*args, **kwargs):
        with ambiguous_strides_read_as_torch_does():
            return serialize(*args, **kwargs)

    edge.to_executorch = to_executorch
    return edge


def contiguous_before_views(program) -> int:
    """Lay out contiguously each tensor a ``view_copy`` reads in another dim order.

    ExecuTorch serializes a ``view_copy`` as a view of its input's memory
    (``ReplaceViewCopyWithViewPass``), whatever that memory's order: of an NHWC convolution's
    output, ``flatten(2)`` read the bytes in NHWC order as if NCHW, and a small vision
    transformer's Cortex-M program fell from 45 dB to 16 dB (the simulation runs views as
    the runtime does). A ``_clone_dim_order`` to the plain order before such a view makes
    it read what the operator means. Returns how many it put in."""
    from executorch.exir.dialects._ops import ops as exir_ops

    graph, put = program.graph_module.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not exir_ops.edge.aten.view_copy.default:
            continue
        base = node.args[0]
        val = base.meta.get("val")
        order = list(range(val.dim())) if val is not None else []
        if val is None or list(val.dim_order()) == order:
            continue
        with graph.inserting_before(node):
            plain = graph.call_function(exir_ops.edge.dim_order_ops._clone_dim_order.default, (base,),
                                        {"dim_order": order})
        plain.meta = {**base.meta, "val": val.contiguous()}
        node.replace_input_with(base, plain)
        put += 1
    return _recompiled(program, put)


def _recompiled(program, changes: int) -> int:
    """``changes``, after checking and recompiling ``program``'s graph where there were any."""
    if changes:
        program.graph_module.graph.lint()
        program.graph_module.recompile()
    return changes


def _nchw(node) -> bool:
    import torch

    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dim() == 4 and val.dtype.is_floating_point


# Operators whose math is floating point: on int8 values they compute nothing right.
FLOAT_MATH = ("hardswish", "hardsigmoid", "sigmoid", "tanh", "gelu", "silu", "elu", "exp", "log", "erf", "sqrt",
              "rsqrt", "reciprocal", "softmax", "_softmax", "log_softmax", "_log_softmax", "pow")


def floats_on_quantized_values(program) -> int:
    """Give a floating-point operator that ExecuTorch's Cortex-M passes left on int8 values
    the floats it computes on: dequantize before it and quantize after it, with the
    quantization parameters the passes annotated on it. ExecuTorch 1.5.1's
    ``DecomposeHardswishPass`` fuses a hardswish only right after a convolution or linear;
    after the clamp ``ClampHardswishPass`` puts before it (mobilenet_v3_small, 19 of them)
    the hardswish was left computing on int8 values, which pteforge's reference simulation
    found (backends/toolkit/simulate.py). Returns how many it mended."""
    import torch
    from executorch.exir.dialects._ops import ops as exir_ops

    graph, mended = program.graph_module.graph, 0
    for node in list(graph.nodes):
        schema = getattr(node.target, "_schema", None)
        # ATen's: cortex_m::softmax, which the passes made of a quantized softmax, takes int8
        name = schema.name.removeprefix("aten::") if schema is not None else ""
        if node.op != "call_function" or name not in FLOAT_MATH or not node.args:
            continue
        source, val = node.args[0], node.meta.get("val")
        given = getattr(source, "meta", {}).get("val")
        qin, qout = (node.meta.get("input_qparams") or {}).get(0), (node.meta.get("output_qparams") or {}).get(0)
        if given is None or val is None or given.dtype != torch.int8 or qin is None or qout is None:
            continue
        with graph.inserting_before(node):
            dq = graph.call_function(exir_ops.edge.cortex_m.dequantize_per_tensor.default,
                                     (source, float(qin.scale), int(qin.zp), qin.qmin, qin.qmax, qin.dtype))
        dq.meta = {**source.meta, "val": given.to(torch.float32)}
        node.replace_input_with(source, dq)
        with graph.inserting_after(node):
            q = graph.call_function(exir_ops.edge.cortex_m.quantize_per_tensor.default,
                                    (node, float(qout.scale), int(qout.zp), qout.qmin, qout.qmax, qout.dtype))
        q.meta = dict(node.meta)
        node.replace_all_uses_with(q, delete_user_cb=lambda user: user is not q)
        node.meta = {**node.meta, "val": val.to(torch.float32)}
        mended += 1
    return _recompiled(program, mended)


def constants_filled_in_their_quantization(program) -> int:
    """Fill a constant whose quantize ExecuTorch's Cortex-M passes folded away with its
    value quantized, in the integer type its readers take.

    ``FoldAndAnnotateQParamsPass`` takes the quantize after ``zeros_like`` (``full_like(x,
    0)`` in the edge dialect), ``full`` or ``scalar_tensor`` into the node's annotation and
    leaves the fill as it was: ``full_like`` of an int8 tensor then held the float value
    itself, ``0`` where zero is the zero point (``8``), so ``torch.where(mask, y,
    torch.zeros_like(y))`` put -0.11 where eager has 0 (14.6 dB against 38.3 dB for the
    same model on TOSA, whose passes compute such constants in their quantization); a
    ``torch.full(size, -0.25)`` stayed float32 and the int8 ``where`` reading it made floats
    that the dequantize after it refused. Each fill ``v`` becomes ``clamp(round(v / scale)
    + zero_point)``, in the quantization's type, as quantizing it would. Returns how many."""
    import torch

    graph, filled = program.graph_module.graph, 0
    for node in graph.nodes:
        name = _op_name(node)
        position = {"full": 1, "full_like": 1, "scalar_tensor": 0}.get(name)
        val, qout = node.meta.get("val"), (node.meta.get("output_qparams") or {}).get(0)
        if (node.op != "call_function" or position is None or len(node.args) <= position or qout is None
                or not isinstance(val, torch.Tensor) or qout.dtype.is_floating_point
                or any(_op_name(user) == "quantize_per_tensor" for user in node.users)):
            continue  # not a fill, or its quantize still after it
        value = node.args[position]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        quantized = min(max(round(float(value) / float(qout.scale)) + int(qout.zp), qout.qmin), qout.qmax)
        if quantized == value and val.dtype == qout.dtype:
            continue
        node.update_arg(position, quantized)
        if val.dtype != qout.dtype:
            node.update_kwarg("dtype", qout.dtype)
            node.meta["val"] = val.to(qout.dtype)
        filled += 1
    return _recompiled(program, filled)


def _op_name(node) -> str:
    """The operator's name without its namespace (``full_like``), or ``""``."""
    return getattr(getattr(node.target, "_schema", None), "name", "").split("::")[-1]


def in_elementary_operators(program) -> int:
    """Write out the operators Cortex-M's edge configuration keeps whole for its passes to
    fuse, where they were left on floats: ``hardswish``, ``hardsigmoid`` and ``silu`` have no
    kernel in ExecuTorch 1.5.1's portable library (nor in any other), so a program calling
    them loads on no device. ``x * clamp(x + 3, 0, 6) / 6`` and ``x * sigmoid(x)``: kernels
    every runtime links. Returns how many it wrote out."""
    from executorch.exir.dialects._ops import ops as exir_ops

    aten = exir_ops.edge.aten
    graph, written = program.graph_module.graph, 0
    for node in list(graph.nodes):
        name = _op_name(node)
        if node.op != "call_function" or name not in ("hardswish", "hardsigmoid", "silu") or not node.args:
            continue
        x, val = node.args[0], node.meta.get("val")

        def made(op, *args, _node=node, _val=val):
            new = graph.call_function(op, args)
            new.meta = {**_node.meta, "val": _val}
            return new

        with graph.inserting_before(node):
            if name == "silu":
                out = made(aten.mul.Tensor, x, made(aten.sigmoid.default, x))
            else:
                gate = made(aten.div.Scalar, made(aten.clamp.default, made(aten.add.Scalar, x, 3.0), 0.0, 6.0), 6.0)
                out = gate if name == "hardsigmoid" else made(aten.mul.Tensor, x, gate)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        written += 1
    return _recompiled(program, written)
