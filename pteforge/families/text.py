"""What a text-generation family is: decoder-only language models with a KV cache, built
from a Hugging Face config (``checkpoints``: each catalog name's Hugging Face id and
architecture, so ``--weights none`` needs no download), what they are exported to, and what
a machine needs to export them. Their steps through the pipeline (quantizing before
capture, the KV cache, the greedy-decoding proof) are :mod:`pteforge.text.llm`'s, which the
run gives every model of this task. A text-generation family is one file: a subclass of
:class:`TextGenerationFamily` with its word, category and checkpoints (``gemma.py``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, cast

from ..core.errors import ModelError, ResourceError, UsageError, WeightsError, one_line
from ..core.spec import WEIGHTS_NONE, WEIGHTS_PRETRAINED, InputSpec, ModelSpec, Target
from . import families, family
from .base import Family

CATEGORY = "gemma"  # the executorch_flutter app's word for its text-generation model
TASK = "text-generation"
DEFAULT_MAX_SEQ_LEN = 128
PROMPT_TOKENS = 8  # the seeded prompt, after the bos token
NEW_TOKENS = 16  # greedy steps the proof decodes


class TextGenerationFamily(Family):
    task = TASK
    # catalog name -> {"id": Hugging Face id, "config": AutoConfig.for_model's fields, with model_type}
    checkpoints: ClassVar[dict[str, dict]] = {}
    outputs = ("logits per call, the last position's [1, 1, vocab] on the CPU (every position's elsewhere); "
               "the KV cache lives in the program")
    everyday = False  # ~1 GB per fp32 program: exported when asked for, not by the default run or --all

    def spec(self, name: str) -> ModelSpec:
        return llm_spec(name)

    def check(self, spec: ModelSpec, config) -> None:
        check_memory(spec)

    def supports(self, target) -> bool:
        return supported(target)[0]

    def capture_variants(self, targets) -> tuple:
        return capture_variants(targets)


# -- the model ---------------------------------------------------------------------------
def llm_spec(ref: str, max_seq_len: int | None = None, cache: str | None = None) -> ModelSpec:
    """A catalog name (gemma-3-270m), a Hugging Face id or a local checkpoint directory;
    ``cache``: ``--llm-cache`` (None: in-place)."""
    length = DEFAULT_MAX_SEQ_LEN if max_seq_len is None else max_seq_len  # 0 is refused, not the default
    if length < PROMPT_TOKENS + NEW_TOKENS + 2:
        raise UsageError(f"--max-seq-len {length} is too short for the proof ({PROMPT_TOKENS + 1}-token prompt, "
                         f"{NEW_TOKENS} new tokens)", fix=f"give --max-seq-len {PROMPT_TOKENS + NEW_TOKENS + 2} or more")
    owners = _checkpoints()
    category = CATEGORY  # a Hugging Face id or a directory: the app's category for text generation
    if ref in owners:
        name, source, (path, category) = ref, "catalog", owners[ref]
    elif Path(ref).is_dir():
        path = str(Path(ref).resolve())
        name, source = Path(path).name, "llm"
        if not (Path(path) / "config.json").is_file():
            raise UsageError(f"--llm {ref}: the directory has no config.json",
                             fix="give a Hugging Face checkpoint directory (config.json, weights, tokenizer)")
    elif "/" in ref and not ref.startswith((".", "/")):
        name, source, path = ref.rsplit("/", 1)[1], "llm", ref
    else:
        raise UsageError(f"--llm {ref}: not a catalog model, a local directory or a Hugging Face id",
                         fix=f"give one of {', '.join(owners)}, an id like google/gemma-3-270m, or a checkpoint dir")
    inputs = (InputSpec((1, length), "int64"), InputSpec((length,), "int64"))
    return ModelSpec(name=name, family=category, task=TASK, inputs=inputs, factory="pteforge.families.text:build",
                     source=source, path=path, cache_in_place=cache in (None, "in-place"))


def _checkpoints() -> dict[str, tuple[str, str]]:
    """Every text-generation family's catalog models: name -> (Hugging Face id, category)."""
    return {name: (entry["id"], fam.category) for fam in families()
            for name, entry in getattr(fam, "checkpoints", {}).items()}


def _architecture(spec: ModelSpec) -> dict:
    """A catalog model's config fields (its family's ``checkpoints``)."""
    fam = cast(TextGenerationFamily, family(spec.family))  # a catalog spec: its family is a text one
    return dict(fam.checkpoints[spec.name]["config"])


def max_seq_len(spec: ModelSpec) -> int:
    return spec.inputs[0].shape[1]


def _offline_hint(spec: ModelSpec) -> str:
    return (f"download it once (`hf download {spec.path}`; Gemma needs its license accepted), give a local "
            "checkpoint directory with --llm DIR, or build it from its config with --weights none")


def load_config(spec: ModelSpec):
    from transformers import AutoConfig

    if spec.source == "catalog":
        entry = _architecture(spec)
        return AutoConfig.for_model(entry.pop("model_type"), **entry)
    try:
        return AutoConfig.from_pretrained(spec.path)
    except Exception as exc:  # noqa: BLE001 -- offline, unknown id, gated repo: one line
        if spec.path is not None and Path(spec.path).is_dir():  # a local checkpoint: its config.json is the problem, not the network
            from transformers import __version__

            raise ModelError(f"cannot read {Path(spec.path) / 'config.json'}: {one_line(exc, 240)}",
                             fix=f"check its model_type and fields against transformers {__version__} "
                                 "(a newer architecture needs a newer transformers)") from None
        raise WeightsError(f"cannot read the config of {spec.path}: {one_line(exc)[:160]}", fix=_offline_hint(spec)) from None


def build(spec: ModelSpec, weights: str, seed: int):
    """The eager Hugging Face model: pretrained weights, or seeded random ones (--weights none)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = load_config(spec)
    config = getattr(config, "text_config", None) or config
    _check_causal(spec, config)
    if weights == WEIGHTS_NONE:
        torch.manual_seed(seed)
        model = _exportable_kernels(lambda **how: AutoModelForCausalLM.from_config(config, dtype=torch.float32, **how))
    elif weights == WEIGHTS_PRETRAINED:
        try:
            model = _exportable_kernels(
                lambda **how: AutoModelForCausalLM.from_pretrained(spec.path, dtype=torch.float32, **how))
        except Exception as exc:  # noqa: BLE001
            raise WeightsError(f"cannot load {spec.path}: {one_line(exc)[:160]}", fix=_offline_hint(spec)) from None
    else:
        raise WeightsError(f"--weights {weights}: a language model takes its weights from its checkpoint",
                           fix="give the checkpoint directory with --llm DIR, or --weights none")
    _check_length(spec, model.config)
    return model.eval().requires_grad_(False)


def _check_causal(spec: ModelSpec, config) -> None:
    """A model transformers does not build for text generation (an encoder-decoder such as
    T5, an encoder) is refused in one line naming it, not as a capture failure quoting
    transformers' list of 189 configuration classes."""
    try:
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        )
    except ImportError:  # moved in another transformers: building it says what is wrong
        return
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelError(f"--llm {spec.path}: {config.model_type} ({type(config).__name__}) is not a model "
                         "transformers builds for text generation (AutoModelForCausalLM)",
                         fix="give a decoder-only language model (Llama, Qwen, Gemma, Phi, Mistral, ...); "
                             "export other models with --model")


def _exportable_kernels(make):
    """The model built with kernels torch.export can capture: attention through
    ``scaled_dot_product_attention`` (eager attention for architectures that refuse it,
    Gemma 2), and mixture-of-experts layers as batched matmuls over the chosen experts'
    weights. transformers' default for experts, ``grouped_mm``, is a custom operator on
    CPU (``transformers::grouped_mm_fallback``) that no ExecuTorch runtime has: a Qwen3-MoE
    failed to lower with "Missing out variants"."""
    try:
        return make(attn_implementation="sdpa", experts_implementation="batched_mm")
    except ValueError as exc:
        if "scaled_dot_product_attention" not in str(exc):
            raise
        return make(attn_implementation="eager", experts_implementation="batched_mm")


def _check_length(spec: ModelSpec, config) -> None:
    length = max_seq_len(spec)
    window = getattr(config, "sliding_window", None)
    if window and "sliding_attention" in (getattr(config, "layer_types", None) or []) and length > window:
        # the exported cache replaces sliding-window layers by full ones: exact up to the window only
        raise UsageError(f"--max-seq-len {length} is longer than {spec.name}'s sliding window ({window})",
                         fix=f"give --max-seq-len {window} or less")
    limit = getattr(config, "max_position_embeddings", None)
    if limit and length > limit:
        raise UsageError(f"--max-seq-len {length} is longer than {spec.name}'s {limit} positions",
                         fix=f"give --max-seq-len {limit} or less")


# An export's peak memory, over all its processes, per byte of the model's fp32 weights: Gemma
# 3 270M's (1.07 GB of weights) peaked at 11.4 GB exporting fp32, 8da4w and 8da8w with two
# workers and the runtime child proving one (sampled each 0.5 s; docs/text-generation.md).
PEAK_PER_WEIGHT_BYTE = 10.6


SKIP_MEMORY_CHECK = "PTEFORGE_SKIP_MEMORY_CHECK"


def parameter_count(spec: ModelSpec) -> int:
    """The model's parameters, counted on a model built without memory (meta tensors)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = load_config(spec)
    config = getattr(config, "text_config", None) or config
    _check_causal(spec, config)
    with torch.device("meta"):
        model = _exportable_kernels(lambda **how: AutoModelForCausalLM.from_config(config, **how))
    return sum(p.numel() for p in model.parameters())


def check_memory(spec: ModelSpec) -> None:
    """Refuse, before any work, a model this machine has too little memory to export."""
    if os.environ.get(SKIP_MEMORY_CHECK):
        return
    import psutil


    params = parameter_count(spec)
    weights = params * 4
    need, total = weights * PEAK_PER_WEIGHT_BYTE, psutil.virtual_memory().total
    if need > total:
        raise ResourceError(
            f"{spec.name} has {params / 1e9:.2f} B parameters ({weights / 1e9:.1f} GB at fp32); exporting it needs "
            f"about {need / 1e9:.0f} GB of memory ({PEAK_PER_WEIGHT_BYTE}× its fp32 weights, as measured for Gemma 3 "
            f"270M), and this machine has {total / 1e9:.0f} GB",
            fix=f"export it on a machine with {need / 1e9:.0f} GB or more, or set {SKIP_MEMORY_CHECK}=1 to try anyway")


def capture_variants(targets: list[Target]) -> tuple:
    """(backend, precision) of the targets that may need a capture of their own: weights
    quantized before capture, one token per call (no dynamic shapes), or transformers' own
    attention (the main capture has the fused one when the model allows)."""
    from ..backends import default_registry

    registry = default_registry()
    return tuple(sorted({(t.primary, t.precision) for t in targets if supported(t)[0] and (
        t.precision.quantized or not registry.get(t.primary).llm_dynamic_shapes
        or not registry.get(t.primary).llm_fused_attention)}, key=lambda bp: (bp[0], bp[1].value)))


# -- one target -----------------------------------------------------------------------------
def llm_backends() -> list:
    from ..backends import default_registry

    return [b for b in default_registry() if b.llm_precisions]


def supported(target: Target) -> tuple[bool, str | None]:
    from ..backends import default_registry

    precisions = default_registry().get(target.primary).llm_precisions
    if not precisions:
        return False, (f"pteforge exports language models to {', '.join(b.name for b in llm_backends())}; "
                       f"{target.primary} is not wired for them (its KV cache and attention need their own lowering)")
    if len(target.backends) > 1:
        return False, "a language model is exported to one backend, not a priority chain"
    if target.precision not in precisions:
        return False, (f"{target.primary} exports language models at {', '.join(p.value for p in precisions)}, "
                       f"not {target.precision.value}")
    return True, None
