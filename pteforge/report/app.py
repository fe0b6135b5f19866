"""What the executorch_flutter example app makes of a manifest.

The app (abdelaziz-mahdy/executorch_flutter, ``example/lib/services/model_index_service.dart``
and ``example/lib/models/model_registry.dart``) reads ``index.json`` with Dart casts
that throw on a missing or mistyped field; an older, stricter parser still in apps in
the wild also requires ``hash``, ``generated``, ``labels`` and ``backends`` and hides
every model without ``platforms``. The tables below are those casts;
``tests/flutter_app.py`` ports the Dart code itself and the tests hold the two together.
"""

from __future__ import annotations

from ..core.kernels import app_unlinked

# field -> (Dart type, required by the current app, required by the older app)
TOP = {
    "version": ("String", True, True),
    "generated": ("String", False, True),
    "baseUrl": ("String", True, True),
    "models": ("List", True, True),
    "labels": ("List", False, True),
    "backends": ("Map", False, True),
}
MODEL = {
    "name": ("String", True, True),
    "modelName": ("String", True, True),
    "category": ("String", True, True),
    "backend": ("String", True, True),
    "hash": ("String", False, True),
    "size": ("int", True, True),
    "sizeMB": ("num", True, True),
    "inputSize": ("int", False, False),
    "remoteUrl": ("String", True, True),
    "platforms": ("List", False, False),
    "backendDescription": ("String", False, False),
    "labelsFile": ("String", False, False),
    "labelsRemoteUrl": ("String", False, False),
}
LABELS = {
    "name": ("String", True, True),
    "category": ("String", True, True),
    "hash": ("String", False, True),
    "size": ("int", True, True),
    "remoteUrl": ("String", True, True),
}
# the categories the app's model registry lists (tests/flutter_app.py CATEGORIES); language
# models' `gemma` is not one of them: parsed, not shown
APP_CATEGORIES = ("mobilenet", "yolo", "movenet", "blazeface", "yolo-pose", "yolo-face")
APP_BACKENDS = ("xnnpack", "coreml", "metal", "mps", "vulkan", "qnn")
APP_PLATFORMS = ("android", "ios", "macos", "linux", "windows", "web")

_IS = {
    "String": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "num": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "List": lambda v: isinstance(v, list),
    "Map": lambda v: isinstance(v, dict),
}


def _fields(obj, table: dict, where: str, older: bool) -> list[str]:
    problems = []
    for name, (dart, required, required_old) in table.items():
        value = obj.get(name)
        if value is None:
            if required or (older and required_old):
                problems.append(f"{where}has no {name}")
        elif not _IS[dart](value):
            problems.append(f"{where}{name} is {type(value).__name__}, the app reads {dart}")
    return problems


def rejections(manifest: dict, older: bool = False) -> list[str]:
    """Why the app (``older``: the older parser) would throw on this manifest; [] when it reads it."""
    if not isinstance(manifest, dict):
        return ["the manifest is not a JSON object"]
    problems = _fields(manifest, TOP, "", older)
    for key, table in (("models", MODEL), ("labels", LABELS)):
        items = manifest.get(key)
        for i, item in enumerate(items if isinstance(items, list) else []):
            if not isinstance(item, dict):
                problems.append(f"{key}[{i}] is not an object")
                continue
            where = entry_name(item, i) if key == "models" else f"{key}[{i}]"
            problems += _fields(item, table, f"{where} ", older)
            if isinstance(item.get("platforms"), list) and not all(isinstance(p, str) for p in item["platforms"]):
                problems.append(f"{where} platforms holds a non-string")
    return problems


def notes(manifest: dict) -> list[str]:
    """What the app does with entries it reads but may not show as intended, one line per kind."""
    found: dict[str, list[int]] = {}
    models = [m for m in manifest.get("models", []) if isinstance(m, dict)]
    keys: dict[str, int] = {}
    for i, m in enumerate(models):
        key = f"{m.get('modelName')}_{m.get('backend')}"
        if key in keys:
            found.setdefault(f"share the app's key {key} with {entry_name(models[keys[key]], keys[key])}: "
                             "the app keeps one of them", []).append(i)
        keys.setdefault(key, i)
        if not m.get("platforms"):
            found.setdefault("have no platforms: the older app hides them", []).append(i)
        elif set(m["platforms"]) - set(APP_PLATFORMS):
            found.setdefault(f"name platforms the app does not know (it knows {', '.join(APP_PLATFORMS)})", []).append(i)
        if m.get("category") not in APP_CATEGORIES:
            found.setdefault(f"have category {m.get('category')!r}: the app shows only {', '.join(APP_CATEGORIES)}", []).append(i)
        if m.get("backend") not in APP_BACKENDS:
            where = ("they need no delegate, only the kernels of their operators in its runtime"
                     if m.get("backend") == "portable" else "they load only where its runtime has their delegate")
            found.setdefault(f"have backend {m.get('backend')!r}, not one the app knows: it lists them without "
                             f"checking, and {where}", []).append(i)
        kernels = (m.get("delegation") or {}).get("kernels") if isinstance(m.get("delegation"), dict) else None
        unlinked = app_unlinked(kernels, m.get("task")) if isinstance(kernels, list) else None
        if unlinked:
            found.setdefault(f"fail to load in the app: {unlinked.replace('it calls', 'they call', 1)}", []).append(i)
        url = m.get("remoteUrl")
        if isinstance(url, str) and "://" not in url:
            found.setdefault("have a relative remoteUrl: the app downloads remoteUrl as it is "
                             "(export or publish with --base-url)", []).append(i)
    return [f"{', '.join(entry_name(models[i], i) for i in idx)} {text}" for text, idx in found.items()]


def entry_name(entry: dict, index: int) -> str:
    """An entry as its user knows it: its file's name (``models[3]`` where it has none)."""
    file = entry.get("file") or entry.get("remoteUrl")
    return str(file).replace("\\", "/").rsplit("/", 1)[-1] if isinstance(file, str) and file else f"models[{index}]"
