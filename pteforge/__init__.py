"""pteforge: PyTorch models to ExecuTorch programs for every backend, with proof.

The public API (imports stay lazy: ``import pteforge`` loads neither torch nor ExecuTorch)::

    pteforge.export(models, plan, config)   # capture once, lower per target, verify
    pteforge.plan_targets(["xnnpack", "vulkan+xnnpack", "xnnpack:int8"])
    pteforge.backends()                     # availability of every backend here
    pteforge.load_best("models/index.json", "mobilenet_v3_small", platform="android")
"""

__version__ = "0.1.0"

__all__ = ["backends", "export", "load_best", "plan_targets", "__version__"]


def __getattr__(name):
    if name in ("export", "plan_targets", "backends"):
        from . import api

        return getattr(api, name)
    if name == "load_best":
        from .selection import load_best

        return load_best
    raise AttributeError(name)
