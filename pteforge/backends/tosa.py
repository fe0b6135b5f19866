from __future__ import annotations

from ..core.spec import Precision
from ._arm import TOSA_TOOLS, ArmBackend
from .base import Docs


class Tosa(ArmBackend):
    name = "tosa"
    order = 150
    title = "TOSA (Arm)"
    runtime_name = "TOSABackend"
    platforms = ("embedded",)
    hardware = "NPU (reference)"
    use_case = "Arm's portable TOSA graph, for checking Arm NPU coverage and for TOSA consumers"
    description = "TOSA flatbuffer (Arm reference)"
    precisions = (Precision.INT8, Precision.FP32)
    recipe_names = {Precision.INT8: "TOSA_INT8", Precision.FP32: "TOSA_FP"}
    default_precision = Precision.INT8
    requires = (TOSA_TOOLS,)
    docs = Docs(
        overview=(
            "Lowers the graph to Arm's Tensor Operator Set Architecture (TOSA 1.0), the "
            "intermediate form behind the Ethos-U and VGF backends."
        ),
        features=("TOSA-1.0+INT (int8, default) and TOSA-1.0+FP profiles.",),
        target_requirements=("A TOSA consumer: Arm's reference model or a TOSA-based compiler.",),
        development_requirements=("tosa-tools==2026.5.0 from PyPI.",),
        cmake_targets=(),
        build_flags=(),
        prebuilt="No on-device runtime: TOSA programs are for the reference model and tooling.",
        links=("https://www.mlplatform.org/tosa",),
    )
    code_sample = """from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
partitioner = [TOSAPartitioner(TosaCompileSpec("TOSA-1.0+INT"))]"""

    def simulators(self):
        from ._arm import tosa_simulator

        return tosa_simulator(self.runtime_name)

    def compile_spec(self, precision):
        from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec

        return TosaCompileSpec("TOSA-1.0+INT" if precision is Precision.INT8 else "TOSA-1.0+FP")

    def partitioner_for(self, spec):
        from executorch.backends.arm.tosa.partitioner import TOSAPartitioner

        return TOSAPartitioner(spec)
