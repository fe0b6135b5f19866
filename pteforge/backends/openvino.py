from __future__ import annotations

import re

from ..core.spec import Precision
from ..core.system import cpu_flags
from .base import Backend, Docs, Requirement, narrowed_support

# ops OpenVINO's PyTorch frontend converts that ExecuTorch 1.5.1's partitioner does not list
_CONVERTED_NOT_LISTED = {"aten.upsample_bilinear2d.vec"}


class OpenVINO(Backend):
    name = "openvino"
    cost = 0.65
    order = 110
    title = "OpenVINO"
    runtime_name = "OpenvinoBackend"
    platforms = ("linux", "windows", "embedded")
    hardware = "CPU/GPU/NPU"
    use_case = "Intel CPUs, integrated GPUs and NPUs"
    description = "Intel CPU/GPU/NPU (OpenVINO)"
    precisions = (Precision.FP32, Precision.INT8)
    default_precision = Precision.FP32
    requires = (
        Requirement("openvino", "uv pip install 'openvino>=2025.1,<2026'"),
        Requirement("nncf", "uv pip install 'nncf>=3.1,<3.3'"),
    )
    docs = Docs(
        overview="The OpenVINO delegate compiles the graph with Intel's OpenVINO for Intel CPUs, GPUs and NPUs.",
        features=("fp32 and int8 (NNCF quantizer).", "CPU, GPU and NPU devices."),
        target_requirements=("Intel x86-64 CPU, Intel GPU or NPU; Linux or Windows with the OpenVINO runtime.",),
        development_requirements=("openvino>=2025.1,<2026 and nncf>=3.1,<3.3 (nncf 3.4 and 2.x break ExecuTorch 1.5.1).",),
        cmake_targets=("openvino_backend",),
        build_flags=("-DEXECUTORCH_BUILD_OPENVINO=ON",),
        prebuilt="Registered in the executorch pip wheel's runtime (Linux x86-64).",
        links=("https://docs.openvino.ai/",),
    )
    code_sample = """from executorch.backends.openvino.partitioner import OpenvinoPartitioner
from executorch.exir.backend.compile_spec_schema import CompileSpec
partitioner = [OpenvinoPartitioner([CompileSpec("device", b"CPU")])]"""

    def partitioners(self, precision):
        from executorch.backends.openvino.partitioner import OpenvinoPartitioner
        from executorch.exir.backend.compile_spec_schema import CompileSpec

        class Partitioner(OpenvinoPartitioner):
            """ExecuTorch 1.5.1's OpenVINO partitioner keeps bilinear upsampling from being
            decomposed, and OpenVINO's frontend converts it (``aten.upsample_bilinear2d.vec``),
            but the support table the partitioner asks leaves it out, so a model that
            upsamples (LRASPP, FPNs, U-Nets) failed to lower: "was not decomposed or
            delegated". Those nodes are named supported, as the partitioner does for its
            own NNCF patterns."""

            refused_ops: frozenset = frozenset()  # operators the frontend could not convert (``lower``)

            def partition(self, exported_program):
                self._enabled_ops_by_name.update(
                    n.name for n in exported_program.graph.nodes
                    if n.op == "call_function" and getattr(n.target, "__name__", "") in _CONVERTED_NOT_LISTED)
                # Left outside (the partitioner's own op_names_to_skip is not asked about
                # the operators it supports):
                # - nodes touching complex tensors: OpenVINO's frontend has no complex
                #   dtype ("KeyError: torch.complex64": the magnitude of an STFT);
                # - a node whose 0-dim value leaves the delegate: OpenVINO's runtime fails
                #   the delegate ("CALL_DELEGATE execute failed ... 0x1": a model
                #   returning y.max() or a loss-like mean);
                # - operators its frontend could not convert in this program (``lower``);
                # - embedding lookups: on a CPU where OpenVINO computes in bf16, one feeding
                #   a linear layer or a matmul inside the delegate computed garbage (max abs
                #   ~1e35; ExecuTorch 1.5.1, OpenVINO 2025). The CPU that runs the file
                #   decides, not the one that exports it, so they are always left out: a
                #   gather on the portable kernels.
                outside = _complex_nodes(exported_program.graph) | {
                    n.name for n in exported_program.graph.nodes
                    if n.op == "call_function" and getattr(n.target, "__name__", "") in self.refused_ops | _WRONG_INSIDE}
                while True:
                    with _refusing(outside):
                        result = super().partition(exported_program)
                    scalars = _scalar_outputs(exported_program.graph)
                    if scalars <= outside:
                        return result
                    outside |= scalars
                    for node in exported_program.graph.nodes:
                        node.meta.pop("delegation_tag", None)

        return [Partitioner([CompileSpec("device", b"CPU")])]

    def lower(self, exported, plan, rest):
        """Lowered; where OpenVINO's frontend finds no conversion for an operator it was
        given (its partitioner lists ``aten.index_put`` as supported, and ``F.fold``'s
        index_put failed: "No conversion rule found for operations: aten.index_put.default"),
        lowered again with that operator left to the portable kernels."""
        refused: set[str] = set()
        while True:
            for p in [*plan.partitioners, *rest]:
                if hasattr(p, "refused_ops"):
                    p.refused_ops = frozenset(refused)
            try:
                return super().lower(exported, plan, rest)
            except Exception as exc:
                unconverted = _unconverted(exc) - refused
                if not unconverted:
                    raise
                refused |= unconverted

    def prepare(self, exported, precision, example):
        from .toolkit.rewrite import openvino_friendly

        return openvino_friendly(exported)

    def runtime_precision(self, precision):
        # OpenVINO's CPU plugin infers in bf16 on CPUs with bf16 support unless told
        # f32, and ExecuTorch 1.5.1's OpenVINO compile specs cannot pass that hint
        # (option values reach OpenVINO as strings, its config must be a dict).
        # So the record says what really ran.
        if precision is Precision.FP32 and _cpu_has_bf16():
            return "bf16"
        return None

    def quantizer(self, precision):
        if precision is not Precision.INT8:
            return None
        from executorch.backends.openvino.quantizer import OpenVINOQuantizer

        return OpenVINOQuantizer()

    def plan(self, precision):
        plan = super().plan(precision)
        if precision is Precision.INT8:
            plan.quantize = _nncf_quantize
        return plan


_WRONG_INSIDE = frozenset({"aten.embedding.default"})  # see Partitioner.partition


def _nncf_quantize(module, batches):
    """ExecuTorch's OpenVINO PTQ (NNCF quantize_pt2e, with bias correction). Weights
    stay as quantize/dequantize pairs (fold_quantize=False): OpenVINO's PyTorch
    frontend cannot convert convolutions over folded int8 constants."""
    from executorch.backends.openvino.quantizer import quantize_model

    return quantize_model(module, batches, subset_size=len(batches), transform_fn=lambda batch: batch)


def _refusing(names: set[str]):
    """The OpenVINO partitioner, inside, takes none of the nodes ``names``."""
    from executorch.backends.openvino import partitioner

    return narrowed_support(partitioner, "OpenvinoOperatorsSupport", lambda _s, _m, node: node.name not in names)


def _unconverted(exc: BaseException) -> set[str]:
    """The ATen operators OpenVINO's frontend says it found no conversion rule for."""
    found = re.search(r"No conversion rule found for operations: ([^\n]*)", str(exc))
    return {op.strip() for op in found[1].split(",") if op.strip().startswith("aten.")} if found else set()


def _complex_nodes(graph) -> set[str]:
    """The nodes with a complex tensor among their inputs or results."""
    import torch

    def complex_(value) -> bool:
        return isinstance(value, torch.Tensor) and value.is_complex()

    return {node.name for node in graph.nodes
            if any(complex_(v) for v in torch.utils._pytree.tree_leaves(node.meta.get("val")))
            or any(complex_(i.meta.get("val")) for i in node.all_input_nodes)}


def _scalar_outputs(graph) -> set[str]:
    """The delegated nodes whose 0-dim value leaves their partition."""
    import torch

    names = set()
    for node in graph.nodes:
        tag, value = node.meta.get("delegation_tag"), node.meta.get("val")
        if tag is not None and isinstance(value, torch.Tensor) and value.dim() == 0 \
                and any(user.meta.get("delegation_tag") != tag for user in node.users):
            names.add(node.name)
    return names


def _cpu_has_bf16() -> bool:
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags
