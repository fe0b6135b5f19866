"""Text generation: decoder-only language models with a KV cache (Gemma 3 270M, Gemma 4 E2B
the executorch_flutter app's chat runs, and any Hugging Face causal LM through ``--llm``).
Built, captured, lowered and proven by :mod:`pteforge.llm`; the app's category for them is
``gemma``."""

from __future__ import annotations

from typing import ClassVar

from ..spec import ModelSpec
from .base import Family


class GemmaFamily(Family):
    word = "gemma"
    category = "gemma"
    task = "text-generation"
    models = ("gemma-3-270m", "gemma-4-e2b-it")
    model_help = ("Gemma 3 270M (google/gemma-3-270m, the default), or gemma-4-e2b-it (google/gemma-4-E2B-it, "
                  "the app's chat model): text generation with a KV cache")
    outputs = ("logits per call, the last position's [1, 1, vocab] on the CPU (every position's elsewhere); "
               "the KV cache lives in the program")
    order = 60
    everyday = False  # ~1 GB per fp32 program: exported when asked for, not by the default run or --all
    capture_job: ClassVar[str] = "pteforge.llm:capture"
    target_job: ClassVar[str] = "pteforge.llm:export_target"

    def spec(self, name: str) -> ModelSpec:
        from ..llm import llm_spec

        return llm_spec(name)

    def check(self, spec: ModelSpec, config) -> None:
        from ..llm import check_memory

        check_memory(spec)

    def supports(self, target) -> bool:
        from ..llm import supported

        return supported(target)[0]

    def capture_variants(self, targets) -> tuple:
        from ..llm import capture_variants

        return capture_variants(targets)
