"""What a text-generation family is: decoder-only language models with a KV cache, built
from a Hugging Face config (``checkpoints``: each catalog name's Hugging Face id and
architecture, so ``--weights none`` needs no download) and exported by the steps of
:mod:`pteforge.text.llm` through the same pipeline as every other model. A text-generation
family is one file: a subclass of :class:`TextGenerationFamily` with its word, category and
checkpoints (``gemma.py``)."""

from __future__ import annotations

from typing import ClassVar

from ..core.spec import ModelSpec
from .base import Family


class TextGenerationFamily(Family):
    task = "text-generation"
    # catalog name -> {"id": Hugging Face id, "config": AutoConfig.for_model's fields, with model_type}
    checkpoints: ClassVar[dict[str, dict]] = {}
    outputs = ("logits per call, the last position's [1, 1, vocab] on the CPU (every position's elsewhere); "
               "the KV cache lives in the program")
    everyday = False  # ~1 GB per fp32 program: exported when asked for, not by the default run or --all

    def export_steps(self):
        from ..text.llm import TextGeneration

        return TextGeneration

    def spec(self, name: str) -> ModelSpec:
        from ..text.llm import llm_spec

        return llm_spec(name)

    def check(self, spec: ModelSpec, config) -> None:
        from ..text.llm import check_memory

        check_memory(spec)

    def supports(self, target) -> bool:
        from ..text.llm import supported

        return supported(target)[0]

    def capture_variants(self, targets) -> tuple:
        from ..text.llm import capture_variants

        return capture_variants(targets)
