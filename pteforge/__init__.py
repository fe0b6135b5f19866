"""pteforge: PyTorch models to ExecuTorch programs for every backend, with proof.

The public API (imports stay lazy: ``import pteforge`` loads neither torch nor ExecuTorch)::

    models = pteforge.select_models(mobilenet=[], refs=["mypkg.models:build"], input_shapes=["1,3,224,224"])
    plan = pteforge.plan_targets(["xnnpack", "vulkan+xnnpack", "xnnpack:int8"], platform="android")
    pteforge.export(models, plan, pteforge.ExportConfig(out_dir=Path("models"), weights="none"))
    pteforge.backends()                     # availability of every backend here
    pteforge.load_best("models/index.json", "mobilenet_v3_small", platform="android")
    pteforge.publish(Path("models"), Path("site"), base_url="https://example.org/pte")
"""

__version__ = "0.1.0"

__all__ = ["ExportConfig", "backends", "export", "load_best", "plan_targets", "publish", "select", "select_models",
           "__version__"]

_WHERE = {
    "export": "api", "plan_targets": "api", "backends": "api", "load_best": "app.selection", "select": "app.selection",
    "select_models": "models", "ExportConfig": "core.spec", "publish": "app.publish",
}


def __getattr__(name):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(name)
