from __future__ import annotations

from ..spec import Precision
from .base import Backend, Docs


class CortexM(Backend):
    name = "cortex-m"
    cost = 0.55
    order = 160
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
# quantize with CortexMQuantizer, then:
edge = to_edge(exported, compile_config=cortex_m_edge_compile_config())
edge._edge_programs["forward"] = CortexMPassManager(edge.exported_program()).transform()"""

    # no delegate: its cortex_m:: kernels have reference implementations in ExecuTorch
    simulated_on = "ExecuTorch's cortex_m:: reference implementations"

    def partitioners(self, precision):
        return []

    def quantizer(self, precision):
        from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

        return CortexMQuantizer()

    def lower(self, exported, plan, rest):
        from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
        from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
        from executorch.exir import to_edge, to_edge_transform_and_lower

        config = cortex_m_edge_compile_config()
        edge = (
            to_edge_transform_and_lower(exported, partitioner=rest, compile_config=config)
            if rest
            else to_edge(exported, compile_config=config)
        )
        # Cortex-M rewrites operators in place instead of delegating; this is how
        # ExecuTorch's own Cortex-M flow applies its pass manager to an edge program.
        edge._edge_programs["forward"] = CortexMPassManager(edge.exported_program()).transform()
        return edge
