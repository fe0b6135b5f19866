from __future__ import annotations

import sys

from ..core.spec import Precision
from .base import Backend, Check, Docs


class Cadence(Backend):
    name = "cadence"
    order = 100
    title = "Cadence Xtensa DSP"
    aliases = ("xtensa", "hifi")
    runtime_name = None  # Cadence rewrites ops to cadence:: kernels; no delegate blob
    ops_namespace = "cadence"
    platforms = ("embedded",)
    hardware = "DSP"
    use_case = "Cadence Xtensa HiFi / Vision DSPs"
    description = "Cadence Xtensa DSP (int8)"
    precisions = (Precision.INT8,)
    default_precision = Precision.INT8
    docs = Docs(
        overview=(
            "Cadence's flow quantizes the model and rewrites operators into cadence:: kernels "
            "for Xtensa HiFi and Vision DSPs (no delegate blob)."
        ),
        features=("int8 (CadenceQuantizer).", "HiFi4/HiFi5 and Vision kernels."),
        target_requirements=("A Cadence Xtensa DSP and the Xtensa toolchain to build the runtime.",),
        development_requirements=("Python >= 3.12 for ExecuTorch 1.5.1's Cadence AOT code.",),
        cmake_targets=("cadence_ops_lib",),
        build_flags=("-DEXECUTORCH_BUILD_CADENCE=ON",),
        prebuilt="Not prebuilt: build with Cadence's Xtensa toolchain.",
    )
    code_sample = """from executorch.backends.cadence.aot.compiler import quantize_and_export_to_cadence
edge = quantize_and_export_to_cadence(model, example_inputs)"""

    def lower_check(self) -> Check:
        if sys.version_info < (3, 12):
            return Check(
                False,
                f"ExecuTorch 1.5.1's Cadence AOT code needs Python >= 3.12 (this is {sys.version_info.major}.{sys.version_info.minor})",
                "export Cadence targets from a Python 3.12 environment",
            )
        return Check(True, "Python >= 3.12")

    def partitioners(self, precision):
        return []

    def quantizer(self, precision):
        return None  # the Cadence flow quantizes inside quantize_and_export_to_cadence

    def lower(self, exported, plan, rest):
        from executorch.backends.cadence.aot.compiler import quantize_and_export_to_cadence

        inputs = tuple(
            node.meta["val"] for node in exported.graph.nodes if node.op == "placeholder"
            and node.name in exported.graph_signature.user_inputs
        )
        import torch

        example = tuple(torch.zeros(v.shape, dtype=v.dtype) for v in inputs)
        return quantize_and_export_to_cadence(exported.module(), example)
