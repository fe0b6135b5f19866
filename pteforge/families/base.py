"""What a task family is: everything pteforge knows about one kind of model, in one class.

A family (classification, detection, pose, ...) names its catalog models and how they are
built, the preprocessing facts the manifest carries, its labels, how ``validate`` decodes
its outputs as an app would, the metric that says whether a program agrees with eager
PyTorch, how to draw its results on a photo, the manifest category the app uses and its
CLI word (``--yolo-pose``). Adding a family is adding one file to this package.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..core.errors import UsageError
from ..core.spec import InputSpec, ModelSpec, Preprocessing
from .vision import draw_results, prepare_image


@dataclass
class Prepared:
    """One photo made ready for a model: the input tensor, and what decoding needs to map
    the outputs back to the photo (``meta``: e.g. the letterbox)."""

    tensor: Any
    meta: Any = None


class Family:
    """One task family. Subclasses set the class attributes and override what differs."""

    word: ClassVar[str]  # the CLI flag (--WORD) and the config key
    category: ClassVar[str]  # the manifest's category, the app's word for it
    task: ClassVar[str]  # classification, detection, pose, segmentation, ...
    models: ClassVar[tuple[str, ...]] = ()  # catalog names; the first is the default
    aliases: ClassVar[dict[str, tuple[str, ...]]] = {}  # catalog name -> other names it answers to
    model_help: ClassVar[str] = ""  # --WORD's help: what the names are
    factory: ClassVar[str] = ""  # "module:function" taking (spec, weights, seed)
    input_shape: ClassVar[tuple[int, ...]] = ()
    input_dtype: ClassVar[str] = "float32"
    preprocessing: ClassVar[Preprocessing | None] = None
    labels_file: ClassVar[str | None] = None  # written beside the artifacts, named by the manifest
    labels_from: ClassVar[str | None] = None  # the distribution the names come from (keys their cache)
    outputs: ClassVar[str] = ""  # what the outputs are: `pteforge models` shows it
    min_agreement: ClassVar[float] = 0.9  # at float precisions, on real photos
    order: ClassVar[int] = 100
    everyday: ClassVar[bool] = True  # in the default run and --all (False: only when named)
    resizable: ClassVar[int] = 0  # its models take a square image of any multiple of this side (0: their own size only)

    # -- its steps -------------------------------------------------------------------
    def export_steps(self):
        """The steps its models go through, when they are not the pipeline's own (capture
        with torch.export, quantize, lower, prove on eager's outputs, write): a subclass of
        ``pteforge.stages.pipeline.Steps``, or None: the run's own for its task (a text-generation
        family's models take ``text.llm.TextGeneration``)."""
        return None

    # -- the catalog ---------------------------------------------------------------
    def spec(self, name: str) -> ModelSpec:
        return ModelSpec(
            name=name, family=self.category, task=self.task,
            inputs=(InputSpec(self.input_shape_of(name), self.input_dtype),), factory=self.factory,
            preprocessing=self.preprocessing_of(name), labels=self.labels_file,
        )

    def input_shape_of(self, name: str) -> tuple[int, ...]:
        return self.input_shape

    def preprocessing_of(self, name: str) -> Preprocessing | None:
        return self.preprocessing

    def specs(self) -> list[ModelSpec]:
        return [self.spec(name) for name in self.models]

    def resized(self, spec: ModelSpec, shape: tuple[int, ...]) -> ModelSpec:
        """``spec`` taking images of ``shape`` (``--input-shape 1,3,320,320``), its
        preprocessing scaled with it; a usage error where the model takes no such shape."""
        side = shape[-1]
        if not self.resizable:
            raise UsageError(f"--input-shape {','.join(map(str, shape))} does not suit {spec.name}: its input is "
                             f"{'x'.join(map(str, spec.inputs[0].shape))} only", fix="leave out --input-shape")
        if len(shape) != 4 or shape[:2] != (1, 3) or shape[2] != side or side % self.resizable:
            raise UsageError(f"--input-shape {','.join(map(str, shape))} does not suit {spec.name}: it takes one square "
                             f"image whose side is a multiple of {self.resizable}",
                             fix=f"e.g. --input-shape 1,3,{10 * self.resizable},{10 * self.resizable}")
        pre = spec.preprocessing
        pre = replace(pre, size=side, resize=round(pre.resize * side / pre.size) if pre.resize else None) if pre else None
        return replace(spec, inputs=(InputSpec(tuple(shape), spec.inputs[0].dtype),), preprocessing=pre)

    def supports(self, target) -> bool:
        """Whether this family's models are exported to ``target`` (a target it does not take
        still gets its row, UNAVAILABLE, from its job; its fp32 reference is not made)."""
        return True

    def check(self, spec: ModelSpec, config) -> None:
        """Refuse, before any work, what this family's models cannot do in this run (raise a
        pteforge error saying why and what to do); nothing by default."""

    def capture_variants(self, targets) -> tuple:
        """(backend, precision) pairs captured once more after the backend's source transform."""
        from ..backends import source_transform_variants

        return source_transform_variants(targets)

    def output_classes(self, outputs: list) -> int | None:
        """How many classes its output scores (checked against a model's labels), or None
        where its labels name something else (keypoints)."""
        return None

    # -- labels ----------------------------------------------------------------------
    def label_names(self) -> list[str]:
        """The class (or keypoint) names the labels file holds."""
        return []

    # -- validation on photos ----------------------------------------------------------
    def prepare(self, image, spec: ModelSpec) -> Prepared:
        """A photo (path or PIL image) through the model's preprocessing, as the app does it."""
        tensor, meta = prepare_image(image, spec.preprocessing)
        return Prepared(tensor, meta)

    def decode(self, outputs: list, meta, names: list[str] | None) -> list[dict]:
        """The program's outputs as an app shows them (top-5, boxes, keypoints, masks)."""
        return []

    def agreement(self, reference: list, outputs: list, meta) -> float | None:
        """How far the program's outputs agree with eager's on one photo, in [0, 1], by the
        family's own metric (None: the SQNR alone is the comparison)."""
        return None

    def draw(self, image, decoded: list[dict], dest) -> None:
        """Write ``image`` annotated with ``decoded`` to ``dest`` (a .jpg)."""
        draw_results(image, decoded, dest)

    def __repr__(self) -> str:
        return f"<family {self.category}>"


class CustomFamily(Family):
    """Models from outside the catalog: compared with eager by SQNR on seeded inputs."""

    word = "model"
    category = "custom"
    task = "custom"
    order = 1000
