"""Where models come from: the catalog (every family's models) and custom sources."""

from __future__ import annotations

from ..core.errors import UsageError
from ..core.spec import InputSpec
from ..families import families, family
from ..families.text import TASK, llm_spec
from .catalog import build_catalog


def select_models(every: bool = False, refs=(), input_shapes=(), input_dtypes=(), labels_only: bool = False,
                  llms=(), max_seq_len: int | None = None, own: dict | None = None, llm_cache: str | None = None,
                  **chosen) -> list:
    """The models a command line names, as ``ModelSpec``s (the CLI and ``pteforge.export``
    callers refuse the same things). ``chosen`` holds one list of catalog names per family
    word, as its flag (``mobilenet=[...]``, ``yolo_pose=[...]``; empty: the family's default
    model; None: not asked); ``refs`` are custom models (``package.module:factory``,
    ``file.pt2``, ``file.onnx`` or a TorchScript file) with their ``input_shapes``/``input_dtypes``; ``llms`` are
    language models (a Hugging Face id or checkpoint directory), ``max_seq_len`` their KV
    cache's length and ``llm_cache`` how it is written (``--llm-cache``); ``own`` (``task``, ``name``, ``labels_file``, ``mean``, ``std``, ``fit``)
    says what the custom models are for the app (``task.as_task``). Nothing named (and not
    ``labels_only``) means every everyday catalog model, as the seed does (language models
    only when named)."""
    words = {fam.word.replace("-", "_"): fam for fam in families()}
    unknown = sorted(set(chosen) - set(words))
    if unknown:
        raise UsageError(f"unknown model family {unknown[0]!r}", fix=f"use one of {', '.join(sorted(words))}")
    catalog = build_catalog()
    everyday = [spec for spec in catalog if next(f for f in families() if f.category == spec.family).everyday]
    names = [spec.name for spec in everyday] if every else []
    for key, fam in words.items():
        asked = chosen.get(key)
        for name in asked or ([fam.models[0]] if asked is not None else []):
            spec = catalog.get(name)
            if spec.family != fam.category:
                other = next(f for f in families() if f.category == spec.family)
                raise UsageError(f"{name} is not one of --{fam.word}'s models ({', '.join(fam.models)})",
                                 fix=f"use --{other.word} {name}")
            names.append(spec.name)
    specs = [catalog.get(name) for name in dict.fromkeys(names)]
    if input_shapes and input_dtypes and len(input_dtypes) not in (1, len(input_shapes)):
        raise UsageError("give one --input-dtype, or one per --input-shape", fix="e.g. --input-shape 1,3 --input-dtype int64")
    dtypes = tuple(InputSpec.check_dtype(d) for d in input_dtypes)
    inputs = tuple(
        InputSpec.parse(shape, dtypes[i] if len(dtypes) > 1 else (dtypes[0] if dtypes else "float32"))
        for i, shape in enumerate(input_shapes)
    )
    specs += _own_models(refs, inputs, dtypes, own)

    for flag, given in (("--max-seq-len", max_seq_len), ("--llm-cache", llm_cache)):
        if given is not None and not llms and not any(s.task == TASK for s in specs):
            raise UsageError(f"{flag} applies to language models", fix="add --gemma or --llm ID_OR_DIR")
    specs = [llm_spec(s.name, max_seq_len, llm_cache) if s.task == TASK else s for s in specs]
    specs += [llm_spec(ref, max_seq_len, llm_cache) for ref in llms]
    if (input_shapes or input_dtypes) and not refs:  # a catalog model at another size (YOLO at 320)
        refused = ("--input-dtype applies to --model: catalog models take their own dtype" if input_dtypes else
                   "a catalog model takes one image: give one --input-shape" if len(inputs) != 1 else
                   "--input-shape applies to the models named" if not names else None)
        if refused:
            raise UsageError(refused, fix="e.g. --yolo yolo11n --input-shape 1,3,320,320, or --model package.module:factory "
                                          "--input-shape ... --input-dtype ...")
        specs = [family(s.family).resized(s, inputs[0].shape) for s in specs]
    if not specs and not labels_only:
        specs = everyday
    return specs


def _own_models(refs, inputs: tuple, dtypes: tuple, own: dict | None) -> list:
    """The ``--model``s and a config file's ``[[model]]`` tables, as the app shows them
    (``own``: --task, --name, --labels-file, --mean, --std, --fit)."""
    from .own import custom_spec
    from .task import as_task, from_table

    own = {k: v for k, v in (own or {}).items() if v}
    if own.get("name") and len([r for r in refs if not isinstance(r, dict) or not r.get("name")]) > 1:
        raise UsageError(f"--name names one --model, and {len(refs)} are given", fix="export them one at a time")
    if own and not refs:
        raise UsageError(f"--{next(iter(own)).replace('_', '-')} describes a --model", fix="give --model too, or leave it out")
    return [from_table(ref, inputs, dtypes, own) if isinstance(ref, dict) else as_task(custom_spec(ref, inputs, dtypes), **own)
            for ref in refs]
