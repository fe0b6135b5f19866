from __future__ import annotations

from .base import Backend, Docs


class Portable(Backend):
    name = "portable"
    cost = 0.6  # lowering, and verification on the portable kernels
    order = 180
    cpu_fallback = 2
    fp32_reference = True
    title = "Portable CPU kernels"
    runtime_name = None  # no delegate: every op runs on ExecuTorch's portable kernels
    platforms = ("android", "ios", "macos", "linux", "windows", "web", "embedded")
    hardware = "CPU"
    use_case = "Reference and maximum portability (no delegate; slowest)"
    description = "Portable CPU kernels (no delegate)"
    docs = Docs(
        overview=(
            "No delegate: every operator runs on ExecuTorch's portable C++ kernels. "
            "Runs wherever the ExecuTorch runtime builds, including WebAssembly; "
            "much slower than a delegate (measured 200-250x slower than XNNPACK here)."
        ),
        features=("Every core ATen operator.", "No extra library to link."),
        target_requirements=("Any CPU the ExecuTorch runtime compiles for.",),
        development_requirements=("Nothing beyond the executorch pip package.",),
        cmake_targets=("portable_ops_lib", "portable_kernels"),
        build_flags=(),
        prebuilt="Included in every prebuilt ExecuTorch package.",
    )
    code_sample = "partitioner = []  # no delegate: portable kernels only"

    def partitioners(self, precision):
        return []

    def prepare(self, exported, precision, example):
        from .toolkit.rewrite import video_as_frames

        return video_as_frames(exported)  # no 3-D convolution or max pooling kernel here
