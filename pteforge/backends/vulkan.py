from __future__ import annotations

import contextlib
import functools
import inspect

from ..core.spec import Precision
from .base import Backend, Docs

# What phones taught the executorch_flutter app's exporter (docs/backends/vulkan.md).
FP32_CAUTION = "Adreno and Mali GPUs compute fp32 Vulkan programs wrongly (device reports); prefer the fp16 default"
TEXTURE_LIMITS = (2048, 2048, 2048)


def compile_options(precision: Precision) -> dict:
    """The VulkanPartitioner options devices proved: texture storage (the default: not
    overridden) within Apple's 2048 texture limit, fp16 unless fp32 is asked for."""
    options: dict = {"texture_limits": TEXTURE_LIMITS}
    if precision is Precision.FP16:
        options["force_fp16"] = True
    return options


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
    precisions = (Precision.FP16, Precision.FP32)
    default_precision = Precision.FP16
    docs = Docs(
        overview=(
            "The Vulkan delegate runs the graph as GLSL compute shaders on any Vulkan 1.1 GPU. "
            "pteforge exports it as the executorch_flutter models repo does after running it on phones: "
            "fp16 (`force_fp16`), texture storage, texture limits (2048, 2048, 2048)."
        ),
        features=(
            "fp16 by default: " + FP32_CAUTION.capitalize() + " (executorch_flutter models repo, commit f133091, "
            "2026-02-07: \"Adreno/Mali GPUs produce incorrect results with FP32 Vulkan compute shaders. FP16 is the "
            "standard path for mobile GPU inference and produces correct results on all platforms\"). "
            "`--backends vulkan:fp32` still exports fp32, with that caution beside it.",
            "Texture storage (the default), never buffer storage: buffer storage gave all-zero outputs on Adreno "
            "(models repo commit 873f167; the texture UBO overflow it worked around is fixed upstream, "
            "pytorch/executorch#17294).",
            "Texture limits (2048, 2048, 2048): Apple GPUs through MoltenVK cap 3D textures at 2048 and asserted "
            "in MTLTextureDescriptor with the default (16384, 16384, 2048) (models repo commit e32d241); larger "
            "tensors fall back to buffer storage.",
        ),
        target_requirements=(
            "A Vulkan 1.1 driver: Android 7+ GPUs; desktop GPUs with Vulkan drivers; MoltenVK on Apple.",
        ),
        development_requirements=("Nothing beyond the executorch pip package.",),
        cmake_targets=("vulkan_backend",),
        build_flags=("-DEXECUTORCH_BUILD_VULKAN=ON",),
        prebuilt="Included in the prebuilt Android AAR; not in the pip wheel's runtime.",
        links=("https://www.vulkan.org/", "https://github.com/pytorch/executorch/issues/17293",
               "https://github.com/pytorch/executorch/pull/17294"),
    )
    code_sample = """from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
partitioner = [VulkanPartitioner({"force_fp16": True, "texture_limits": (2048, 2048, 2048)})]"""

    def pattern_sets(self) -> list[tuple]:
        return pattern_sets()

    def partitioners(self, precision):
        from executorch.backends.vulkan.partitioner.vulkan_partitioner import (
            VulkanPartitioner,
        )

        return [VulkanPartitioner(compile_options(precision))]

    def caution(self, precision):
        return FP32_CAUTION if precision is Precision.FP32 else None

    def lowering_context(self):
        return patterns_where_they_can_match()


@contextlib.contextmanager
def patterns_where_they_can_match():
    """Each RoPE pattern graph made once per process (``_pattern_graphs_once``), and only
    for a program holding every operator of one of them (~1.5 s of each process; see
    backends/toolkit/patterns.py): the partitioner and the fusion pass match the others, and the
    detectors, as they are. WebGPU lowers with Vulkan's partitioner, inside this too."""
    from executorch.backends.vulkan import patterns as vk

    from ..patches.executorch_patches import replaced_in_executorch as replaced
    from .toolkit.patterns import can_match

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
    from executorch.backends.vulkan.patterns import fusable_patterns

    for entry in fusable_patterns.values():
        if entry.get_graphs_fn is not None and not hasattr(entry.get_graphs_fn, "cache_info"):
            entry.get_graphs_fn = functools.cache(entry.get_graphs_fn)
