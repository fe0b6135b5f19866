"""What a model of one's own is for the app: ``--task`` (``as_task``: a family's category,
decoding and preprocessing), and a config file's ``[[model]]`` tables (``from_table``)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from ..core.errors import UsageError
from ..core.limits import read_text_file
from ..core.spec import InputSpec, ModelSpec, Preprocessing
from ..core.system import file_name
from ..families import families
from .own import custom_spec

# --task's words: the app's tasks, each the first family that does it (or a family's own category)
TASKS = {"classification": "classification", "detection": "detection", "pose": "pose", "face": "face-detection",
         "segmentation": "segmentation"}


def parse_channels(text, flag: str) -> tuple[float, float, float] | None:
    """``0.485,0.456,0.406`` (or a list of three numbers): one number per RGB channel."""
    if text is None or isinstance(text, tuple):
        return text
    try:
        values = tuple(float(v) for v in (text.split(",") if isinstance(text, str) else text))
    except (TypeError, ValueError):
        values = ()
    if len(values) != 3 or not all(math.isfinite(v) for v in values) or (flag == "--std" and any(v <= 0 for v in values)):
        raise UsageError(f"{flag} {text}: give three numbers, one per RGB channel" + (", each above 0" if flag == "--std" else ""),
                         fix=f"e.g. {flag} " + ("0.485,0.456,0.406" if flag == "--mean" else "0.229,0.224,0.225"))
    return values


def as_task(spec: ModelSpec, task: str | None = None, name: str | None = None, labels_file: str | None = None,
            mean=None, std=None, fit: str | None = None) -> ModelSpec:
    """A model of one's own as the app shows it: ``task`` makes it that family's (category,
    decoding in validate and --draw, agreement on the photos, preprocessing from its input
    shape), ``name`` names it, ``labels_file`` gives its classes (one per line), and
    ``mean``/``std``/``fit`` override the family's preprocessing."""
    if name:
        spec = replace(spec, name=name, labels=f"{file_name(name)}_labels.txt" if spec.names else spec.labels)
    if task is None:
        if labels_file or mean or std or fit:
            raise UsageError("--labels-file, --mean, --std and --fit describe a task's model", fix="give --task too, "
                             f"one of {', '.join(TASKS)}")
        return spec
    fam = next((f for f in families() if f.category == task), None) or \
        next((f for f in families() if f.task == TASKS.get(task) and f.preprocessing is not None), None)
    if fam is None:
        raise UsageError(f"unknown --task '{task}'", fix=f"one of {', '.join(TASKS)}")
    if len(spec.fed) != 1 or len(spec.fed[0].shape) != 4 or spec.fed[0].dtype not in ("float32", None):
        raise UsageError(f"--task {task} takes a model of one float image input, NCHW or NHWC; {spec.name} takes "
                         f"{', '.join('x'.join(map(str, i.shape)) for i in spec.fed)}", fix="leave out --task")
    shape = spec.fed[0].shape
    layout = "NCHW" if shape[1] in (1, 3) else "NHWC" if shape[-1] in (1, 3) else None
    height, width = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    if layout is None or height != width:
        raise UsageError(f"--task {task}: the app feeds square RGB images, and {spec.name} takes {'x'.join(map(str, shape))}",
                         fix="export it with a 1,3,S,S (or 1,S,S,3) input")
    mean, std = parse_channels(mean, "--mean"), parse_channels(std, "--std")
    base = fam.preprocessing or Preprocessing(size=height)
    pre = replace(base, size=height, layout=layout, mean=tuple(mean or base.mean), std=tuple(std or base.std),
                  fit=fit or base.fit, resize=(round(height * base.resize / base.size) if base.resize else None))
    names: tuple[str, ...] = ()
    if labels_file:
        path = Path(labels_file)
        if not path.is_file():
            raise UsageError(f"--labels-file {labels_file}: no such file", fix="give a text file, one class name per line")
        names = tuple(line.strip() for line in read_text_file(path, "--labels-file").splitlines() if line.strip())
        if not names:
            raise UsageError(f"--labels-file {labels_file} names no class", fix="write one class name per line")
    return replace(spec, family=fam.category, task=fam.task, preprocessing=pre,
                   labels=f"{spec.name}_labels.txt" if names else fam.labels_file, names=names)


def from_table(table: dict, inputs: tuple, dtypes: tuple, own: dict) -> ModelSpec:
    """A config file's ``[[model]]`` table as a spec: its source with its own input shapes
    and dtypes (else the file's top-level ones), its own task, name, labels and
    preprocessing (else the top level's), and its backends and precision, kept as requests
    (``ModelSpec.targets``; ``*:PRECISION``: the run's backends at that precision)."""
    if table.get("input_dtype"):
        dtypes = tuple(InputSpec.check_dtype(d) for d in table["input_dtype"])
    if table.get("input_shape"):
        inputs = tuple(InputSpec.parse(shape, dtypes[i] if len(dtypes) > 1 else (dtypes[0] if dtypes else "float32"))
                       for i, shape in enumerate(table["input_shape"]))
    mine = {**own, **{k: table[k] for k in ("task", "name", "labels_file", "mean", "std", "fit") if table.get(k)}}
    spec = as_task(custom_spec(table["source"], inputs, dtypes), **mine)
    backends, precision = table.get("backends"), table.get("precision")
    if backends or precision:
        requests = [b if ":" in b or not precision else f"{b}:{precision}" for b in backends] if backends else \
            [f"*:{precision}"]
        spec = replace(spec, targets=tuple(requests))
    return spec
