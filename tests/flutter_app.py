"""A faithful port of the executorch_flutter example app's manifest parsing.

Ported line by line from abdelaziz-mahdy/executorch_flutter,
``packages/executorch_flutter/example/lib/services/model_index_service.dart``
(``ModelIndex.fromJson``, ``ModelIndexEntry.fromJson``, ``LabelsIndexEntry.fromJson``,
``ModelVersions.fromJson``, ``getModelsForPlatform``, ``getLabelsUrl``) and
``example/lib/models/model_registry.dart`` (``_buildModelsFromIndex``,
``_stringToBackend``, ``_createModelDefinition``), at commit 60c1e6d9.

Dart's ``x as T`` throws on a value of another type and on null; ``x as T?`` accepts
null. ``cast`` below does the same, so a manifest that this port accepts is one the
app accepts. ``OLD`` is the older, stricter parser still in apps in the wild: it
requires ``hash``, ``generated``, ``labels`` and ``backends``, and hides every model
whose ``platforms`` is missing or empty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CURRENT, OLD = "current", "old"
APP_PLATFORMS = ("web", "android", "ios", "macos", "linux", "windows")
# example/lib/models/model_registry.dart: _createModelDefinition's cases
CATEGORIES = ("mobilenet", "yolo", "movenet", "blazeface", "yolo-pose", "yolo-face")
# and its defaults when inputSize is null
DEFAULT_INPUT_SIZE = {"mobilenet": 224, "yolo": 640, "movenet": 192, "blazeface": 128, "yolo-pose": 640, "yolo-face": 640}


class CastError(TypeError):
    """Dart's TypeError: "type 'Null' is not a subtype of type 'String' in type cast"."""


def cast(value, dart_type: str, where: str):
    nullable = dart_type.endswith("?")
    base = dart_type.rstrip("?")
    if value is None:
        if nullable:
            return None
        raise CastError(f"{where}: type 'Null' is not a subtype of type '{base}' in type cast")
    ok = {
        "String": lambda v: isinstance(v, str),
        # jsonDecode gives int for 5 and double for 5.0; bool is not an int in Dart
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "num": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "List<dynamic>": lambda v: isinstance(v, list),
        "Map<String, dynamic>": lambda v: isinstance(v, dict),
    }[base](value)
    if not ok:
        raise CastError(f"{where}: type '{type(value).__name__}' is not a subtype of type '{base}' in type cast")
    return value


@dataclass
class ModelIndexEntry:
    name: str
    modelName: str
    category: str
    backend: str
    hash: str | None
    size: int
    sizeMB: float
    inputSize: int | None
    remoteUrl: str
    platforms: list[str]
    backendDescription: str | None
    labelsFile: str | None
    labelsRemoteUrl: str | None

    @classmethod
    def from_json(cls, json: dict, where: str, version: str = CURRENT) -> "ModelIndexEntry":
        w = lambda k: f"{where}.{k}"  # noqa: E731
        platforms = cast(json.get("platforms"), "List<dynamic>?", w("platforms"))
        return cls(
            name=cast(json.get("name"), "String", w("name")),
            modelName=cast(json.get("modelName"), "String", w("modelName")),
            category=cast(json.get("category"), "String", w("category")),
            backend=cast(json.get("backend"), "String", w("backend")),
            hash=cast(json.get("hash"), "String" if version == OLD else "String?", w("hash")),
            size=cast(json.get("size"), "int", w("size")),
            sizeMB=float(cast(json.get("sizeMB"), "num", w("sizeMB"))),
            inputSize=cast(json.get("inputSize"), "int?", w("inputSize")),
            remoteUrl=cast(json.get("remoteUrl"), "String", w("remoteUrl")),
            platforms=[cast(p, "String", w(f"platforms[{i}]")) for i, p in enumerate(platforms or [])],
            backendDescription=cast(json.get("backendDescription"), "String?", w("backendDescription")),
            labelsFile=cast(json.get("labelsFile"), "String?", w("labelsFile")),
            labelsRemoteUrl=cast(json.get("labelsRemoteUrl"), "String?", w("labelsRemoteUrl")),
        )


@dataclass
class LabelsIndexEntry:
    name: str
    category: str
    hash: str | None
    size: int
    remoteUrl: str

    @classmethod
    def from_json(cls, json: dict, where: str, version: str = CURRENT) -> "LabelsIndexEntry":
        w = lambda k: f"{where}.{k}"  # noqa: E731
        return cls(
            name=cast(json.get("name"), "String", w("name")),
            category=cast(json.get("category"), "String", w("category")),
            hash=cast(json.get("hash"), "String" if version == OLD else "String?", w("hash")),
            size=cast(json.get("size"), "int", w("size")),
            remoteUrl=cast(json.get("remoteUrl"), "String", w("remoteUrl")),
        )


@dataclass
class ModelIndex:
    version: str
    generated: str | None
    baseUrl: str
    models: list[ModelIndexEntry]
    labels: list[LabelsIndexEntry]
    backends: dict
    parser: str = CURRENT

    @classmethod
    def from_json(cls, json: dict, version: str = CURRENT) -> "ModelIndex":
        old = version == OLD
        labels = cast(json.get("labels"), "List<dynamic>" if old else "List<dynamic>?", "labels")
        return cls(
            version=cast(json.get("version"), "String", "version"),
            generated=cast(json.get("generated"), "String" if old else "String?", "generated"),
            baseUrl=cast(json.get("baseUrl"), "String", "baseUrl"),
            models=[
                ModelIndexEntry.from_json(cast(e, "Map<String, dynamic>", f"models[{i}]"), f"models[{i}]", version)
                for i, e in enumerate(cast(json.get("models"), "List<dynamic>", "models"))
            ],
            labels=[
                LabelsIndexEntry.from_json(cast(e, "Map<String, dynamic>", f"labels[{i}]"), f"labels[{i}]", version)
                for i, e in enumerate(labels or [])
            ],
            backends=cast(json.get("backends"), "Map<String, dynamic>" if old else "Map<String, dynamic>?", "backends") or {},
            parser=version,
        )

    def models_for_platform(self, platform: str) -> list[ModelIndexEntry]:
        if self.parser == OLD:  # the older app hides entries without platforms
            return [m for m in self.models if platform in m.platforms]
        # "If platforms list is empty, assume model works on all platforms"
        return [m for m in self.models if not m.platforms or platform in m.platforms]

    def labels_url(self, category: str) -> str | None:
        return next((lab.remoteUrl for lab in self.labels if lab.category == category), None)


@dataclass
class ModelVersions:
    versions: list[str]
    latest: str

    @classmethod
    def from_json(cls, json: dict) -> "ModelVersions":
        return cls(
            versions=[cast(v, "String", f"versions[{i}]") for i, v in enumerate(cast(json.get("versions"), "List<dynamic>", "versions"))],
            latest=cast(json.get("latest"), "String", "latest"),
        )


# model_registry.dart: _stringToBackend
BACKENDS = {"xnnpack": "xnnpack", "coreml": "coreml", "metal": "metal", "mps": "metal", "vulkan": "vulkan", "qnn": "qnn"}


def string_to_backend(backend: str) -> str | None:
    return BACKENDS.get(backend.lower())


@dataclass
class ModelDefinition:
    name: str  # '${modelName}_${backend}': the app's key
    category: str
    remoteUrl: str
    inputSize: int
    hash: str | None
    labelsRemoteUrl: str | None


def build_models(index: ModelIndex, platform: str, available: set[str] | None = None) -> list[ModelDefinition]:
    """``_buildModelsFromIndex``: what the app shows on ``platform`` (its backends ``available``)."""
    out = []
    for entry in index.models_for_platform(platform):
        backend = string_to_backend(entry.backend)
        if backend is not None and available is not None and backend not in available:
            continue
        if entry.category not in CATEGORIES:
            continue  # `default: return null`
        labels = None
        if entry.category in ("mobilenet", "yolo"):
            labels = entry.labelsRemoteUrl or index.labels_url(entry.category)
        out.append(ModelDefinition(
            name=f"{entry.modelName}_{entry.backend}", category=entry.category, remoteUrl=entry.remoteUrl,
            inputSize=entry.inputSize or DEFAULT_INPUT_SIZE[entry.category], hash=entry.hash, labelsRemoteUrl=labels,
        ))
    return out


def parse_both(path_or_json) -> dict[str, ModelIndex]:
    """The manifest through both parsers (each raises CastError as the app would throw)."""
    data = json.loads(Path(path_or_json).read_text()) if isinstance(path_or_json, (str, Path)) else path_or_json
    return {v: ModelIndex.from_json(data, v) for v in (CURRENT, OLD)}


def assert_app_reads(path: Path) -> dict[str, ModelIndex]:
    """Everything the app needs from a manifest pteforge wrote, for both parsers."""
    parsed = parse_both(path)
    index = parsed[CURRENT]
    keys = [f"{m.modelName}_{m.backend}" for m in index.models]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    assert not dupes, f"{path}: the app keeps one of each of {dupes}"
    for m in index.models:
        assert m.platforms and set(m.platforms) <= set(APP_PLATFORMS), (m.name, m.platforms)
        assert m.hash and len(m.hash) == 64, m.name
    for lab in index.labels:
        assert lab.hash and len(lab.hash) == 64 and lab.size > 0, lab.name
    for platform in APP_PLATFORMS:  # the old app shows exactly what the new one does
        assert [m.name for m in parsed[OLD].models_for_platform(platform)] == [
            m.name for m in index.models_for_platform(platform)
        ]
    return parsed
