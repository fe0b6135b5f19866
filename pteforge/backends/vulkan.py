from __future__ import annotations

import contextlib

from ..spec import Precision
from .base import Backend, Docs


class Vulkan(Backend):
    name = "vulkan"
    order = 50
    priority = {"android": 1, "desktop": 0}
    title = "Vulkan"
    runtime_name = "VulkanBackend"
    platforms = ("android", "linux", "windows", "macos", "ios")
    hardware = "GPU"
    use_case = "Cross-vendor GPU acceleration (Android GPUs, desktop GPUs)"
    description = "GPU-accelerated (Vulkan)"
    precisions = (Precision.FP32, Precision.FP16)
    default_precision = Precision.FP32
    docs = Docs(
        overview="The Vulkan delegate runs the graph as GLSL compute shaders on any Vulkan 1.1 GPU.",
        features=("fp32 and fp16 (force_fp16) compute.", "Texture and buffer storage."),
        target_requirements=(
            "A Vulkan 1.1 driver: Android 7+ GPUs; desktop GPUs with Vulkan drivers; MoltenVK on Apple.",
        ),
        development_requirements=("Nothing beyond the executorch pip package.",),
        cmake_targets=("vulkan_backend",),
        build_flags=("-DEXECUTORCH_BUILD_VULKAN=ON",),
        prebuilt="Included in the prebuilt Android AAR; not in the pip wheel's runtime.",
        links=("https://www.vulkan.org/",),
    )
    code_sample = """from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
partitioner = [VulkanPartitioner()]  # {"force_fp16": True} for fp16"""

    def partitioners(self, precision):
        from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

        options = {"force_fp16": True} if precision is Precision.FP16 else {}
        return [VulkanPartitioner(options)]

    def lowering_context(self):
        return patterns_where_they_can_match()


@contextlib.contextmanager
def patterns_where_they_can_match():
    """Each RoPE pattern graph made once per process (``_pattern_graphs_once``), and only
    for a program holding every operator of one of them (~1.5 s of each process; see
    stages/patterns.py): the partitioner and the fusion pass match the others, and the
    detectors, as they are. WebGPU lowers with Vulkan's partitioner, inside this too."""
    from executorch.backends.vulkan import patterns as vk

    from ..stages.patterns import can_match, replaced

    _pattern_graphs_once()

    def only_matching(real):
        def call(*args):  # (graph_module) or (exported_program, graph_module)
            with contextlib.ExitStack() as stack:
                for name, entry in _made_patterns():
                    if not can_match(args[-1], *_pattern_set(name, entry)):
                        stack.enter_context(replaced(entry, "get_graphs_fn", list))
                return real(*args)

        return call

    with replaced(vk, "get_all_fusable_subgraphs", only_matching(vk.get_all_fusable_subgraphs)), \
            replaced(vk, "replace_all_fusable_subgraphs", only_matching(vk.replace_all_fusable_subgraphs)):
        yield


def _made_patterns() -> list[tuple]:
    """(name, entry) of Vulkan's fusable patterns that make pattern graphs."""
    from executorch.backends.vulkan.patterns import fusable_patterns

    return [(name, entry) for name, entry in fusable_patterns.items() if entry.get_graphs_fn is not None]


def _pattern_set(name: str, entry) -> tuple:
    """(the module that defines the patterns, the function making them, their name)."""
    import inspect

    return inspect.getmodule(inspect.unwrap(entry.get_graphs_fn)), entry.get_graphs_fn, name


def pattern_sets() -> list[tuple]:
    """(module, build, name) of each RoPE pattern set, as ``patterns_where_they_can_match`` asks."""
    return [_pattern_set(name, entry) for name, entry in _made_patterns()]


def _pattern_graphs_once() -> None:
    """Each Vulkan pattern graph (the RoPE ones) made once per process, as ExecuTorch means to.

    ExecuTorch 1.5.1 registers ``get_rope_graphs`` and ``get_hf_rope_graphs`` before their
    ``lru_cache`` wraps them (decorator order), so the partitioner and the fusion pass
    each export and lower the three patterns again: ~0.8 s of every Vulkan lowering on this
    machine. The registry gets the cached functions; the graphs are only matched against.
    """
    import functools

    from executorch.backends.vulkan.patterns import fusable_patterns

    for entry in fusable_patterns.values():
        if entry.get_graphs_fn is not None and not hasattr(entry.get_graphs_fn, "cache_info"):
            entry.get_graphs_fn = functools.cache(entry.get_graphs_fn)
