from __future__ import annotations

import contextlib

from ..core.spec import Precision
from .base import Backend, Docs


# Ops that stay on the portable kernels because XNNPACK has no operator that computes
# them, as ExecuTorch's delegation summary names them, with the reason. Anything else
# left outside an XNNPACK program is a gap for backends/toolkit/rewrite.py.
NO_XNNPACK_EQUIVALENT = {
    "aten_embedding_default": "a lookup of rows by token id: XNNPACK has no gather",
    "aten_index_tensor": "indexing by a run-time tensor (a gather): XNNPACK has no gather",
    "aten_gather_default": "XNNPACK has no gather",
    "aten_argmax_default": "XNNPACK has no arg-reduction",
    "aten_topk_default": "XNNPACK has no top-k",
    # an attention mask given at run time: XNNPACK has no boolean tensors
    "aten_where_self": "a select by a boolean mask: XNNPACK has no boolean tensors",
    "aten_any_dim": "a reduction of booleans: XNNPACK has no boolean tensors",
    "aten_bitwise_not_default": "a boolean not: XNNPACK has no boolean tensors",
    "aten_logical_not_default": "a boolean not: XNNPACK has no boolean tensors",
    "aten_ne_scalar": "a comparison (boolean result): XNNPACK has no boolean tensors",
    "aten_eq_scalar": "a comparison (boolean result): XNNPACK has no boolean tensors",
    "dim_order_ops__to_dim_order_copy_default": "a cast from or to a boolean or integer tensor: XNNPACK computes in floats",
}


class Xnnpack(Backend):
    name = "xnnpack"
    order = 10
    cpu_fallback = 1
    priority = {"ios": 2, "android": 2, "desktop": 1, "embedded": 1, "web": 0}
    title = "XNNPACK"
    runtime_name = "XnnpackBackend"
    platforms = ("android", "ios", "macos", "linux", "windows", "web")
    hardware = "CPU"
    use_case = "General-purpose CPU, the fallback that works everywhere"
    description = "CPU-optimized (XNNPACK)"
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC)
    default_precision = Precision.FP32
    llm_precisions = (Precision.FP32, Precision.INT8_DYNAMIC_INT4, Precision.INT8_DYNAMIC_INT8)
    llm_fused_attention = True  # ExecuTorch's LLM runner links XNNPACK with the llama:: kernels
    docs = Docs(
        overview=(
            "The XNNPACK delegate is ExecuTorch's CPU backend for mobile and desktop: "
            "optimised kernels for Arm and x86 CPUs from Google's XNNPACK library."
        ),
        features=(
            "Wide operator support on Arm and x86 CPUs, on any modern phone.",
            "fp32 and fp16 activations; 8-bit static and dynamic quantization.",
            "pteforge writes what XNNPACK has no operator for as ops it takes, with the same values: "
            "LayerNorm and RMSNorm, scaled-dot-product attention (masks and causal included), tanh-GELU "
            "(which ExecuTorch 1.5.1 would run as erf GELU), means and sums over any dims, adaptive "
            "average pooling, split/chunk/unbind/select/squeeze, roll, strided slices, softmax over a "
            "non-last dim, integer-scale nearest upsampling, batched matmul, depthwise kernels over 25 taps "
            "(in bands of rows XNNPACK runs as depthwise); and folds what depends "
            "only on constants (window masks, position ids). CNNs, ViTs, Swin, MaxViT, MobileViT, "
            "EfficientFormer, BERT and Whisper's encoder lower as one XNNPACK subgraph.",
        ),
        target_requirements=(
            "ARM64 on Android, iOS, macOS, Linux and Windows; ARMv7 with NEON on Android.",
            "x86 and x86-64 (up to AVX512) on Windows, Linux and Android; WebAssembly SIMD.",
        ),
        development_requirements=("Nothing beyond the executorch pip package.",),
        cmake_targets=("xnnpack_backend",),
        build_flags=("-DEXECUTORCH_BUILD_XNNPACK=ON",),
        prebuilt="Included in the prebuilt Android AAR, the iOS frameworks and the pip wheel.",
        links=("https://github.com/google/XNNPACK",),
    )
    code_sample = """from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
partitioner = [XnnpackPartitioner()]"""

    # ExecuTorch's recipes for the precisions that have one. fp16 has none: see prepare().
    _RECIPES = {
        Precision.FP32: "FP32",
        Precision.INT8: "PT2E_INT8_STATIC_PER_CHANNEL",
        Precision.INT8_DYNAMIC: "PT2E_INT8_DYNAMIC_PER_CHANNEL",
    }

    def pattern_sets(self) -> list[tuple]:
        return pattern_sets()

    def recipe(self, precision):
        if precision not in self._RECIPES:
            return None
        from executorch.backends.xnnpack.recipes import XNNPACKRecipeProvider
        from executorch.backends.xnnpack.recipes.xnnpack_recipe_types import XNNPackRecipeType

        return XNNPACKRecipeProvider().create_recipe(XNNPackRecipeType[self._RECIPES[precision]])

    def plan(self, precision):
        plan = super().plan(precision)
        # ExecuTorch 1.5.1's XNNPACK recipe builds XnnpackPartitioner(precision_type=...),
        # a keyword the partitioner does not have (it is `config_precisions`), so the
        # recipe's precision is silently dropped. Its quantizer, edge config and backend
        # config are right; the partitioners are ours.
        plan.partitioners = self.partitioners(precision)
        if precision is Precision.INT8 and getattr(plan.quantizer, "global_config", None) is not None:
            plan.quantizer = _with_quantized_pads(plan.quantizer)
        from .toolkit.rewrite import fold_constants

        # mobilenet_v3: 18 portable casts -> 0; Swin's window masks, BERT's position ids
        plan.transform_passes = [fold_constants()]
        return plan

    def partitioners(self, precision):
        from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        if precision is Precision.INT8_DYNAMIC:
            # One partitioner for the dynamically quantized ops and the fp32 ones around
            # them. Two passes (dynamic first, then fp32) let the first decompose what only
            # the second would keep: resnet18's max_pool2d ran on the portable kernels
            # (37 of 61 ms) between 18 subgraphs.
            return [XnnpackPartitioner(config_precisions=[ConfigPrecisionType.DYNAMIC_QUANT, ConfigPrecisionType.FP32])]
        return [XnnpackPartitioner()]

    def llm_partitioners(self, precision):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]  # fp32 and dynamically quantized linears in one pass

    def llm_prepare(self, exported):
        from .toolkit.rewrite import means_as_linears

        # its RMSNorms inside the XNNPACK program, not cutting it in two each (Gemma 3 270M: 109 of them)
        return means_as_linears(exported)

    def lowering_context(self):
        from ..patches.executorch_patches import (
            one_value_constants_take_any_layout,
            softmax_reads_nchw,
            views_of_written_buffers_outside,
            zero_dim_inputs_read_as_nchw,
        )
        from .toolkit.patterns import only_where_they_can_match

        # its bilinear-upsampling and attention pattern graphs (~2 s to make in each
        # process) made only for a program that may hold one (see backends/toolkit/patterns.py)
        context = contextlib.ExitStack()
        context.enter_context(only_where_they_can_match(_pattern_passes()))
        context.enter_context(softmax_reads_nchw())  # these four: see pteforge/patches/executorch_patches.py
        context.enter_context(one_value_constants_take_any_layout())
        context.enter_context(zero_dim_inputs_read_as_nchw())
        context.enter_context(views_of_written_buffers_outside())
        return context

    def lower(self, exported, plan, rest):
        from .toolkit.fuse import fused
        from .toolkit.rewrite import xnnpack_friendly

        # after quantization: adaptive pooling, LayerNorm and RMSNorm (see xnnpack_friendly),
        # and operators written out (hard-swish, a one-hot product) as the one they are (backends/toolkit/fuse.py)
        return super().lower(fused(xnnpack_friendly(exported, late=True)), plan, rest)

    def prepare(self, exported, precision, example):
        from .toolkit.rewrite import xnnpack_friendly

        # split, dim-1 softmax, nearest upsample, ... as ops XNNPACK takes, same values,
        # before quantization too (yolo11n: 6 subgraphs -> 1; see backends/toolkit/rewrite.py).
        exported = xnnpack_friendly(exported)
        if precision is not Precision.FP16:
            return exported
        from .toolkit.fp16 import half_program

        return half_program(exported, example)


def _with_quantized_pads(quantizer):
    """XNNPACK's quantizer, then zero padding quantized as its input is.

    ExecuTorch 1.5.1's quantizer leaves a zero padding (``constant_pad_nd``, ``pad``) that
    no convolution absorbs unannotated, and its partitioner still takes it, from int8 to
    float: XNNPACK then refuses the program at load ("Failed to create StaticConstantPad
    node 10 with code: xnn_status_invalid_parameter"; torchvision's Swin-T and r3d_18,
    whose time padding pteforge's ``video_as_frames`` makes). Padding with zeros keeps its
    input's scale exactly (zero is a zero point), so its output shares its input's."""
    import torch
    from torchao.quantization.pt2e.quantizer import (ComposableQuantizer, QuantizationAnnotation, Quantizer,
                                                     SharedQuantizationSpec)

    spec = quantizer.global_config.input_activation
    aten = torch.ops.aten

    def zero_padding(node) -> bool:
        def arg(i, name, default):
            return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)

        if node.op != "call_function" or "quantization_annotation" in node.meta:
            return False
        if node.target is aten.constant_pad_nd.default:
            value = arg(2, "value", 0)
        elif node.target is aten.pad.default and arg(2, "mode", "constant") == "constant":
            value = arg(3, "value", None)
        else:
            return False
        source = getattr(node.args[0], "meta", {}).get("val")
        return value in (None, 0) and source is not None and source.is_floating_point()

    class QuantizedPads(Quantizer):
        def annotate(self, model):
            for node in filter(zero_padding, model.graph.nodes):
                source = node.args[0]
                node.meta["quantization_annotation"] = QuantizationAnnotation(
                    input_qspec_map={source: spec}, output_qspec=SharedQuantizationSpec((source, node)), _annotated=True)
            return model

        def validate(self, model):
            pass

    return ComposableQuantizer([quantizer, QuantizedPads()])


def _pattern_passes() -> list[tuple]:
    """XNNPACK's passes that match pattern graphs: (pass, the patterns' module, its function
    that makes them, the type it returns)."""
    from executorch.backends.xnnpack._passes.convert_to_sdpa import ConvertToSDPAPass
    from executorch.backends.xnnpack._passes.convert_to_upsample_bilinear2d import ConvertToUpsampleBilinear2d
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    return [(ConvertToUpsampleBilinear2d, bilinear_2d, "get_graphs_dict", dict), (ConvertToSDPAPass, sdpa, "get_graphs", list)]


def pattern_sets() -> list[tuple]:
    """(module, build, name) of each pattern set, as ``lowering_context`` asks about them."""
    from .toolkit.patterns import maker

    return [(module, maker(module, getter), "") for _, module, getter, _ in _pattern_passes()]
