from __future__ import annotations

from .base import Backend, Docs, Requirement

INSTALL = "uv sync --extra coreai (coreai-torch 0.4.2 and coreai-core 1.0.0b2; Linux x86_64 or macOS 26+, Python 3.11+)"


class CoreAI(Backend):
    name = "coreai"
    ray_resource = "macos"
    order = 25
    priority = {"ios": 1}
    title = "Core AI (Apple, OS 27)"
    runtime_name = "CoreAIBackend"
    platforms = ("ios", "macos")
    lowers_not_on = {"windows": "coreai-core has wheels for Linux x86_64 and macOS 26+ only"}
    hardware = "NPU/GPU/CPU"
    use_case = "Apple devices on OS 27: Core ML's successor"
    description = "Apple Neural Engine (Core AI)"
    requires = (Requirement("coreai_torch", INSTALL, package="coreai-torch"),
                Requirement("coreai", INSTALL, package="coreai-core"))
    docs = Docs(
        overview=(
            "The Core AI delegate converts the graph with Apple's coreai-torch into a Core AI model carried inside "
            "the .pte, for iOS and macOS 27, where Core AI schedules it on the Neural Engine, the GPU or the CPU."
        ),
        features=("fp32 programs (Core AI chooses its compute precision on the device).",
                  "Converted in coreai-torch's release mode: operation ids, no Python stacks (no path of the "
                  "exporting machine) in the program.",),
        target_requirements=("iOS 27 / macOS 27, with ExecuTorch built with the Core AI backend.",),
        development_requirements=(
            "The optional extra: " + INSTALL + ". coreai-core 1.0.0b3, which coreai-torch 0.4.3 requires, renamed "
            "AIProgram.get_graph, which ExecuTorch 1.5.1's Core AI backend calls ('AIProgram' object has no attribute "
            "'get_graph'): 0.4.2 with b2 lowers.",
        ),
        cmake_targets=("coreai_backend",),
        build_flags=("-DEXECUTORCH_BUILD_COREAI=ON",),
        prebuilt="Not in the 1.5.1 pip wheels' runtimes: build ExecuTorch with Core AI for iOS/macOS 27.",
        links=("https://developer.apple.com/machine-learning/",),
    )
    code_sample = """from executorch.backends.apple.coreai import CoreAIPartitioner, get_default_compile_config, get_default_passes
partitioner = [CoreAIPartitioner()]  # with transform_passes=get_default_passes(), compile_config=get_default_compile_config()"""

    def partitioners(self, precision):
        from executorch.backends.apple.coreai import CoreAIPartitioner

        return [CoreAIPartitioner()]

    def plan(self, precision):
        from executorch.backends.apple.coreai import get_default_compile_config, get_default_passes

        plan = super().plan(precision)
        plan.transform_passes = get_default_passes()
        plan.edge_config = get_default_compile_config()
        return plan

    def lowering_context(self):
        """coreai-torch in release mode: no Python stacks, and so no path of this machine's
        (the model's source file, site-packages), in the Core AI model inside the .pte."""
        from ..patches.executorch_patches import coreai_without_source_paths

        return coreai_without_source_paths()
