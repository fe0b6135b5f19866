from __future__ import annotations

import copy
import functools
import sys
from typing import Any

from ..core.spec import Precision
from .base import Backend, Docs, Requirement, narrowed_support


class CoreML(Backend):
    name = "coreml"
    ray_resource = "macos"
    cost = 0.5
    order = 20
    priority = {"ios": 0}
    title = "Core ML"
    runtime_name = "CoreMLBackend"
    platforms = ("ios", "macos")
    lowers_not_on = {"windows": "coremltools has no Windows wheels (ExecuTorch installs it on Linux x86_64 and macOS)"}
    hardware = "NPU/GPU/CPU"
    use_case = "Apple devices: Neural Engine, best performance and battery life"
    description = "Apple Neural Engine (CoreML)"
    precisions = (Precision.FP16, Precision.FP32, Precision.INT8, Precision.INT8_WEIGHT, Precision.INT4_WEIGHT)
    default_precision = Precision.FP16  # ExecuTorch's default compute precision
    llm_precisions = (Precision.FP16, Precision.FP32)
    llm_dynamic_shapes = False  # coremltools 9.0 cannot convert a symbolic sequence length
    source_transform_precisions = (Precision.INT4_WEIGHT,)
    requires = (Requirement("coremltools", "uv pip install 'coremltools>=9' (it comes with executorch)"),)
    docs = Docs(
        overview=(
            "The Core ML delegate hands the graph to Apple's Core ML, which schedules it "
            "on the Neural Engine, the GPU or the CPU."
        ),
        features=(
            "fp16 (default) and fp32 compute.",
            "int8 static (PT2E, CoreMLQuantizer; iOS 17+), int8 weight-only (PT2E) and int4 weight-only (torchao, per channel, Linear/Embedding; iOS 18+).",
            "Neural Engine, GPU and CPU compute units.",
        ),
        target_requirements=("iOS 15+ / macOS 12+ (minimum deployment target iOS15 here; iOS 16 for a model in fp16, whose inputs Core ML takes in fp16 from iOS 16).",),
        development_requirements=("coremltools>=9 (installed with executorch); lowers on Linux and macOS.",),
        cmake_targets=("coremldelegate",),
        build_flags=("-DEXECUTORCH_BUILD_COREML=ON",),
        prebuilt="Included in the iOS/macOS Swift packages (backend_coreml).",
        links=("https://developer.apple.com/documentation/coreml",),
    )
    code_sample = """import coremltools as ct
from executorch.backends.apple.coreml.compiler import CoreMLBackend
from executorch.backends.apple.coreml.partition import CoreMLPartitioner
partitioner = [CoreMLPartitioner(compile_specs=CoreMLBackend.generate_compile_specs(
    compute_precision=ct.precision.FLOAT16, minimum_deployment_target=ct.target.iOS15))]"""

    # Our precision → ExecuTorch's Core ML recipe. Weight-only int4 is torchao's
    # per-channel IntxWeightOnlyConfig on Linear/Embedding, applied before capture.
    _RECIPES = {
        Precision.FP32: "FP32",
        Precision.FP16: "FP16",
        Precision.INT8: "PT2E_INT8_STATIC",
        Precision.INT8_WEIGHT: "PT2E_INT8_WEIGHT_ONLY",
        Precision.INT4_WEIGHT: "TORCHAO_INT4_WEIGHT_ONLY_PER_CHANNEL",
    }

    def keyed_pattern_sets(self) -> list[tuple]:
        return keyed_pattern_sets()

    def recipe(self, precision):
        ct = coremltools()
        from executorch.backends.apple.coreml.recipes import (
            CoreMLRecipeProvider,
            CoreMLRecipeType,
        )

        kind = CoreMLRecipeType[self._RECIPES[precision]]
        # fp32/fp16 run from iOS 15; the quantized recipes raise the floor themselves
        # (iOS 17 for PT2E int8, iOS 18 for int4).
        kwargs = {"minimum_deployment_target": ct.target.iOS15} if not precision.quantized else {}
        return CoreMLRecipeProvider().create_recipe(kind, **kwargs)

    def plan(self, precision):
        plan = super().plan(precision)
        if plan.quantizer is not None:
            plan.quantizer = _patterns_built_where_they_can_match(plan.quantizer)
        return plan

    def source_transform(self, precision):
        if precision is not Precision.INT4_WEIGHT:
            return None
        [config] = self.recipe(precision).quantization_recipe.ao_quantization_configs
        return config

    def llm_partitioners(self, precision):
        ct = coremltools()
        from executorch.backends.apple.coreml.compiler import CoreMLBackend
        from executorch.backends.apple.coreml.partition import CoreMLPartitioner

        specs = CoreMLBackend.generate_compile_specs(
            minimum_deployment_target=ct.target.iOS18,
            compute_precision=ct.precision.FLOAT16 if precision is Precision.FP16 else ct.precision.FLOAT32,
            compute_unit=ct.ComputeUnit.CPU_AND_NE)
        # coremltools 9.0 cannot convert the cache update Hugging Face's static cache writes
        # (index_put at cache_position: "Input squeeze_0 has rank 1 != other inputs rank 0"):
        # the cache stays a program buffer updated by the portable kernels, the rest is Core ML
        return [CoreMLPartitioner(compile_specs=specs, take_over_mutable_buffer=False,
                                  skip_ops_for_coreml_delegation=["aten.index_put.default"])]

    def partitioners(self, precision):
        return self.plan(precision).partitioners

    def prepare(self, exported, precision, example):
        from .toolkit.rewrite import coreml_friendly

        return coreml_friendly(exported)  # integer clamp bounds as floats (see there)

    def lowering_context(self):
        from ..patches.coremltools_patches import pipeline_validated_where_scopes_are_checked

        coremltools()  # without the libraries it only looks for
        return pipeline_validated_where_scopes_are_checked()  # see pteforge/patches/coremltools_patches.py

    def fit(self, exported, partitioners):
        """Core ML takes fp16 inputs from iOS 16 (coremltools: "To use fp16 input, please set
        minimum deployment target to iOS16+"): a program holding fp16 values (a model in
        half precision) gets iOS 16 where its target was lower. coremltools converts
        tensors of a few dtypes only (a camera frame's uint8 failed: "KeyError: torch.uint8"):
        in a program holding others, the nodes that touch them stay outside Core ML. And it
        takes inputs in contiguous dim order only ("Core ML does not have general support
        for non-contiguous dim order": the magnitude of an STFT, computed outside Core ML on
        a transposed complex tensor): a node reading a tensor in another order from a node
        outside Core ML stays outside too."""
        import torch

        ct = coremltools()
        from executorch.backends.apple.coreml.compiler import CoreMLBackend
        from executorch.backends.apple.coreml.partition import CoreMLPartitioner
        from executorch.exir.backend.partitioner import DelegationSpec

        values = [node.meta.get("val") for module in exported.graph_module.modules()
                  if isinstance(module, torch.fx.GraphModule) for node in module.graph.nodes]
        dtypes = {getattr(v, "dtype", None) for v in values} - {None}
        if {str(d) for d in dtypes} - _CORE_ML_DTYPES or not all(map(_contiguous, values)):
            partitioners = [_typed(p) if isinstance(p, CoreMLPartitioner) else p for p in partitioners]
        if torch.float16 not in dtypes:
            return partitioners
        fitted = []
        for p in partitioners:
            specs = p.delegation_spec.compile_specs if isinstance(p, CoreMLPartitioner) else None
            current = CoreMLBackend.min_deployment_target_from_compile_specs(specs) if specs is not None else None
            if specs is not None and (current is None or current < ct.target.iOS16):
                spec = CoreMLBackend.generate_minimum_deployment_target_compile_spec(ct.target.iOS16)
                p = copy.copy(p)
                p.delegation_spec = DelegationSpec(p.delegation_spec.backend_id,
                                                   [*(s for s in specs if s.key != spec.key), spec])
            fitted.append(p)
        return fitted


# what coremltools' torch frontend converts (its TORCH_DTYPE_TO_MIL_DTYPE; int64 and float64 narrowed)
_CORE_ML_DTYPES = {f"torch.{d}" for d in ("bool", "float16", "float32", "float64", "int16", "int32", "int64")}


def _core_ml_dtypes_only(node) -> bool:
    """Whether every tensor ``node`` reads or makes has a dtype coremltools converts, or
    ``node`` (de)quantizes: coremltools converts those with their int8/int4 values."""
    if "quantize" in str(getattr(node, "target", "")):
        return True
    values = [node.meta.get("val"), *(a.meta.get("val") for a in node.all_input_nodes)]
    flat = [v for value in values for v in (value if isinstance(value, (list, tuple)) else [value])]
    return all(str(v.dtype) in _CORE_ML_DTYPES for v in flat if hasattr(v, "dtype"))


def _contiguous(value) -> bool:
    """Whether ``value`` is not a tensor, or one in contiguous dim order."""
    import torch

    if not isinstance(value, torch.Tensor):
        return True
    try:
        return value.dim_order() == tuple(range(value.dim()))
    except RuntimeError:  # strides that fit more than one order (size-1 dims)
        return True


def _typed(partitioner):
    """``partitioner`` (a CoreMLPartitioner) taking only nodes whose tensors Core ML converts
    and whose inputs from outside it are in contiguous dim order."""
    from executorch.backends.apple.coreml.partition import coreml_partitioner as module

    base: Any = type(partitioner)  # CoreMLPartitioner (ExecuTorch's, read as Any)

    class Typed(base):
        def partition(self, exported_program):
            verdicts: dict = {}
            signature = exported_program.graph_signature
            weights = {*signature.inputs_to_parameters, *signature.inputs_to_buffers,
                       *signature.inputs_to_lifted_tensor_constants}  # converted as constants

            def accepts(support, submodules, node) -> bool:
                if node not in verdicts:
                    verdicts[node] = False  # while its inputs are asked
                    verdicts[node] = _core_ml_dtypes_only(node) and all(
                        _contiguous(i.meta.get("val")) or i.name in weights or support.is_node_supported(submodules, i)
                        for i in node.all_input_nodes)
                return verdicts[node]

            with narrowed_support(module, "_OperatorsSupportedForCoreMLBackend", accepts):  # for this partition only
                return super().partition(exported_program)

    typed = copy.copy(partitioner)
    typed.__class__ = Typed
    return typed


def coremltools():
    """coremltools, imported without scikit-learn and transformers: its ``_deps`` import them
    only to say whether they are there. scikit-learn (2.1 of the 3.7 s its import took here,
    in every worker that lowers for Core ML) is for converting scikit-learn models, which
    pteforge never does and which coremltools 9 disables anyway for the scikit-learn (>
    1.5.1) installed beside it; transformers (0.5 s more) sets a flag (``_HAS_HF``) nothing
    in coremltools 9 reads. Either one already imported stays as it is."""
    hidden = [name for name in _UNUSED_BY_COREMLTOOLS if name not in sys.modules]
    if "coremltools" not in sys.modules and hidden:
        # ``import sklearn`` raises ImportError: coremltools goes on without it. A None entry is
        # the import system's documented "not importable"; typeshed types sys.modules as modules only.
        for name in hidden:
            sys.modules[name] = None  # type: ignore[assignment]
        try:
            import coremltools as ct
        finally:
            for name in hidden:
                if sys.modules.get(name, 0) is None:
                    del sys.modules[name]
    import coremltools as ct

    return ct


_UNUSED_BY_COREMLTOOLS = ("sklearn", "transformers")


def _patterns_built_where_they_can_match(quantizer):
    """ExecuTorch's ``CoreMLQuantizer``, building only the pattern graphs that may match in
    the program it annotates (``backends/toolkit/patterns.built_only_where_they_can_match``): the
    same annotations (tested), without exporting ~400 patterns at every annotation."""
    guarded = copy.copy(quantizer)
    made: type = type(quantizer)  # CoreMLQuantizer (ExecuTorch's, read as Any)
    guarded.__class__ = _guarded(made)
    return guarded


@functools.cache
def _guarded(base: type) -> type:
    class PatternsWhereTheyCanMatch(base):
        def annotate(self, model):
            from executorch.backends.apple.coreml.quantizer import (
                _coreml_quantizer_utils as utils,
            )

            from .toolkit.patterns import built_only_where_they_can_match, op_names

            with built_only_where_they_can_match(utils, "_get_aten_graph_module", op_names(model)):
                return super().annotate(model)

    return PatternsWhereTheyCanMatch


def keyed_pattern_sets() -> list[tuple]:
    """(module, attr, run) of the Core ML quantizer's pattern graphs, as
    ``_patterns_built_where_they_can_match`` asks for them: ``run()`` annotates a program
    that holds nothing, at each quantized precision, and so asks for every pattern."""
    import torch
    from executorch.backends.apple.coreml.quantizer import (
        _coreml_quantizer_utils as utils,
    )

    def run():
        for precision in CoreML.precisions:
            quantizer = Backend.plan(CoreML(), precision).quantizer  # ExecuTorch's own, unguarded
            if quantizer is not None:
                graph = torch.fx.Graph()
                graph.output(graph.placeholder("x"))
                quantizer.annotate(torch.fx.GraphModule(torch.nn.Module(), graph))

    return [(utils, "_get_aten_graph_module", run)]
