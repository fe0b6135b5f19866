from __future__ import annotations

from .base import Backend, Check, Docs


class MPS(Backend):
    """Kept so that `--backends mps` gets a precise answer instead of "unknown backend".

    The seed tool wrote undelegated files labelled MPS; this backend never lowers.
    """

    name = "mps"
    ray_resource = "macos"
    order = 30
    title = "Metal Performance Shaders (removed)"
    runtime_name = "MPSBackend"
    platforms = ("ios", "macos")
    lowers_not_on = {os: "MPS was removed from ExecuTorch 1.5" for os in ("linux", "macos", "windows")}
    hardware = "GPU"
    use_case = "Removed in ExecuTorch 1.5: use metal (Apple GPU) or coreml"
    description = "Apple GPU (Metal Performance Shaders) - removed"
    docs = Docs(
        overview=(
            "The MPS delegate was removed from ExecuTorch in 1.5. Its role is taken by the "
            "Metal backend (Apple GPU) and by Core ML. The executorch_flutter client maps "
            "`mps` to `metal`."
        ),
        target_requirements=("None: there is no MPS runtime in ExecuTorch 1.5.",),
        development_requirements=("None: use `--backends metal` or `--backends coreml`.",),
        prebuilt="Not in ExecuTorch 1.5 packages.",
    )
    code_sample = "# MPS is gone from ExecuTorch 1.5: use MetalPartitioner or CoreMLPartitioner"

    def lower_check(self) -> Check:
        return Check(
            False,
            "MPS was removed from ExecuTorch 1.5",
            "use --backends metal (Apple GPU) or --backends coreml",
        )

    def run_check(self, host):
        return Check(False, "MPS was removed from ExecuTorch 1.5", "use metal or coreml artifacts")

    def partitioners(self, precision):
        raise RuntimeError("MPS was removed from ExecuTorch 1.5; use metal or coreml")
