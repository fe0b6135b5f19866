"""The jobs of an export run, as typed callables that a worker process (or a Ray task) runs:
one capture per model, one export per (model, target). Their fields are plain data (the
model's spec, the capture's files, the target, the options); each finds the model's steps
when it runs (``steps_of``: the pipeline's, its task's or its family's own), so a model with
steps of its own (text generation) goes through the same runner as every other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.spec import JobConfig, ModelSpec, Target
from ..families import family
from ..families.text import TASK
from .workers import Job


def whose_steps(spec: ModelSpec) -> Any:
    """Which steps ``spec``'s model takes, as ``steps_of`` finds them, without importing them
    (torch and ExecuTorch): its family's own class, its task, or "pipeline"."""
    return family(spec.family).export_steps() or (TASK if spec.task == TASK else "pipeline")


def steps_of(spec: ModelSpec) -> Any:
    """The steps of ``spec``'s model: its family's own (``Family.export_steps``, a plugin's),
    those of its task (text generation: ``text.llm.TextGeneration``, which quantizes before
    capture and proves by greedy decoding), or the pipeline's."""
    from ..stages.pipeline import Steps
    from ..text.llm import TextGeneration

    return family(spec.family).export_steps() or {TASK: TextGeneration}.get(spec.task, Steps)


@dataclass(kw_only=True)
class CaptureJob(Job):
    """Build ``spec``'s model and capture it (``main``), and the variants given (a variant
    job: ``main`` False, after the main capture's job, in the same work folder)."""

    spec: ModelSpec
    config: JobConfig  # the artifact options, and the run options jobs read: nothing else
    work_dir: Path
    variants: tuple[tuple[str, Any], ...] = ()  # (backend, precision) pairs (stages/capture.py)
    main: bool = True

    def __call__(self, on_stage: Callable[[str], None]) -> Any:
        from ..patches.torch_patches import fast_serde

        only = {} if self.main else {"main": False}
        with fast_serde():  # what it saves, saved sooner
            return steps_of(self.spec).capture(self.spec, self.config, self.work_dir, on_stage=on_stage,
                                               variants=self.variants, **only)


@dataclass(kw_only=True)
class TargetJob(Job):
    """Lower, prove and write one (model, target) from the model's capture."""

    capture: Any  # stages.capture.Capture: its files
    spec: ModelSpec
    target: Target
    config: JobConfig  # the artifact options, and the run options jobs read: nothing else

    def __call__(self, on_stage: Callable[[str], None]) -> Any:
        from ..stages.pipeline import export_target

        return export_target(self.capture, self.spec, self.target, self.config, on_stage=on_stage,
                             steps=steps_of(self.spec))
