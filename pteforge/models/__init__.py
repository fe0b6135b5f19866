"""Where models come from: the catalog (torchvision, Ultralytics) and custom sources."""

from __future__ import annotations


def select_models(mobilenet=None, yolo=None, every: bool = False, refs=(), input_shapes=(), input_dtypes=(),
                  labels_only: bool = False) -> list:
    """The models a command line names, as ``ModelSpec``s (the CLI and ``pteforge.export``
    callers refuse the same things): ``mobilenet``/``yolo`` are lists of catalog names
    (empty: the default one; None: not asked), ``refs`` custom models
    (``package.module:factory`` or ``file.pt2``) with their ``input_shapes``/``input_dtypes``.
    Nothing named (and not ``labels_only``) means every catalog model, as the seed does."""
    from ..errors import UsageError
    from ..spec import InputSpec
    from .catalog import DEFAULT_MOBILENET, DEFAULT_YOLO, build_catalog
    from .custom import factory_spec, pt2_spec

    catalog = build_catalog()
    names = catalog.names() if every else []
    names += (mobilenet or [DEFAULT_MOBILENET]) if mobilenet is not None else []
    names += (yolo or [DEFAULT_YOLO]) if yolo is not None else []
    specs = []
    for name in dict.fromkeys(names):
        spec = catalog.get(name)
        if mobilenet and name in mobilenet and spec.family != "mobilenet":
            raise UsageError(f"{name} is not a MobileNet", fix=f"use --yolo {name}")
        if spec not in specs:
            specs.append(spec)
    if input_dtypes and len(input_dtypes) not in (1, len(input_shapes)):
        raise UsageError("give one --input-dtype, or one per --input-shape", fix="e.g. --input-shape 1,3 --input-dtype int64")
    inputs = tuple(
        InputSpec.parse(shape, input_dtypes[i] if len(input_dtypes) > 1 else (input_dtypes[0] if input_dtypes else "float32"))
        for i, shape in enumerate(input_shapes)
    )
    for ref in refs:
        specs.append(pt2_spec(ref) if ref.endswith(".pt2") else factory_spec(ref, inputs))
    if (input_shapes or input_dtypes) and not refs:
        raise UsageError("--input-shape and --input-dtype apply to --model", fix="add --model package.module:factory")
    if not specs and not labels_only:
        specs = list(catalog)
    return specs
