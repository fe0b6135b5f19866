"""Every option of ``pteforge export``, declared once.

One ``Option`` gives the flag and its help (``cli``), the config-file key and its type
(``config``), the line of the CLI reference (``pteforge docs``), and its role:

- ``ARTIFACT``: a field of ``ExportConfig`` that defines what is made; all of them are
  hashed into the artifact's cache key (``cache.py``);
- ``RUN``: a field of ``ExportConfig`` that says how this run runs and where its results
  go, never in a cache key;
  the worker jobs get a ``JobConfig`` (``spec.py``): the ``ARTIFACT`` options and the few
  ``RUN`` ones marked ``jobs`` (where to write, the deadline of a child, --debug), nothing else;
- ``REQUEST``: what to export (models, targets, publishing), read by the command line.

``ExportConfig`` (``spec.py``) holds the ``ARTIFACT`` and ``RUN`` options as typed fields, so
a new option is its line here, its field there (same name and default, in the same order:
``tests/test_typed_config.py`` checks it) and its use. Help texts may name what only the
registries know (``{backends}``, ``{platforms}``, ``{labels_files}``, ``{task_categories}``):
the command line fills them in. This module imports nothing of pteforge's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ARTIFACT, RUN, REQUEST = "artifact", "run", "request"

# the argument groups of `pteforge export --help`, in order
GROUPS = {
    "models": "models",
    "own": "your own model, as the app shows it (with --model)",
    "targets": "targets",
    "precision": "precision",
    "output": "output and proof",
    "publishing": "publishing",
}


@dataclass(frozen=True)
class Option:
    """One export option. ``name`` is its destination, its config-file key and (unless
    ``field``) its ``ExportConfig`` field.

    ``kind``: ``value`` (one value, of ``type``), ``flag`` (present: true), ``off``
    (``--no-NAME``: false), ``append`` (repeatable, a list), ``list`` (several values
    after one flag). ``convert``: how ``ExportConfig`` holds the value (``path``, ``absolute``,
    ``budget``). ``path``: a config file's value is a path read from the file's directory.
    ``file``: a config-file key (False for what only makes sense on the command line).
    ``shape``: the config file's own form of the value (``models``: strings or
    ``[[model]]`` tables; ``shapes``: strings or lists of integers)."""

    name: str
    flags: tuple[str, ...]
    group: str
    help: str
    role: str
    default: Any = None
    kind: str = "value"
    type: type | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | str | None = None  # a tuple, or the name of a list the command line fills in
    field: str | None = None
    convert: str | None = None
    required: bool = False  # ExportConfig takes it without a default
    path: bool = False
    file: bool = True
    shape: str | None = None
    jobs: bool = False  # a RUN option the worker jobs read too (JobConfig)

    @property
    def attr(self) -> str:
        """Its ``ExportConfig`` field."""
        return self.field or self.name

    @property
    def aliases(self) -> tuple[str, ...]:
        """Its other spellings as config keys: its other flags' names."""
        return tuple(f.lstrip("-").replace("-", "_") for f in self.flags[1:]
                     if f.lstrip("-").replace("-", "_") != self.name and not f.startswith("--no-"))


OPTIONS: tuple[Option, ...] = (
    # models (each task family's flag comes first: --mobilenet, --yolo, ...; they are the registry's)
    Option("all", ("--all",), "models", "every catalog model", REQUEST, False, "flag"),
    Option("model", ("--model",), "models",
           "custom model: package.module:factory(literal args...), path/to/file.py:factory, file.pt2, file.onnx, a "
           "TorchScript file (.pt, .ptl, .torchscript) or an Ultralytics checkpoint (yolo train's best.pt: exported as "
           "its family, with its own classes) (repeatable)", REQUEST, kind="append", metavar="REF", path=True,
           shape="models"),
    Option("llm", ("--llm",), "models",
           "a decoder-only language model: a Hugging Face id or a local checkpoint directory (repeatable) "
           "[category gemma]", REQUEST, kind="append", metavar="ID_OR_DIR"),
    Option("max_seq_len", ("--max-seq-len",), "models",
           "language models: the KV cache's length, prompt and generated tokens together (default 128)", REQUEST,
           type=int, metavar="N"),
    Option("llm_cache", ("--llm-cache",), "models",
           "language models on XNNPACK: in-place (the KV cache written by ExecuTorch's llama::update_cache: faster, "
           "and the app's runtime must link custom_ops, which the executorch_flutter app's builds do not) or static "
           "(Hugging Face's static cache, in kernels every runtime links: the executorch_flutter app loads it) "
           "(default in-place)", REQUEST, choices=("in-place", "static")),
    Option("input_shape", ("--input-shape",), "models",
           "input shape of a --model (repeat for several inputs; an ONNX file's or a TorchScript forward's by name, e.g. images=1,3,640,640, and "
           "a scalar's value, e.g. sr=int64:16000), or 1,3,S,S for the catalog models named", REQUEST, kind="append",
           metavar="[NAME=][DTYPE:]N,C,H,W", shape="shapes"),
    Option("input_dtype", ("--input-dtype",), "models", "dtype of each --input-shape (default float32)", REQUEST,
           kind="append", metavar="DTYPE"),
    Option("labels", ("--labels",), "models", "write every family's labels file ({labels_files})", REQUEST, False,
           "flag"),
    # your own model, as the app shows it
    Option("task", ("--task",), "own",
           "what the model does, so the app shows it: classification, detection, pose, face, segmentation (or a "
           "family's category: {task_categories}); it takes that family's decoding, agreement on the photos, labels "
           "and preprocessing (detectors: Ultralytics' output layout). Without it the model's category is custom, "
           "which the app hides", REQUEST, metavar="TASK"),
    Option("name", ("--name",), "own",
           "the model's name in files and the app (default: the file's, the factory's, or for a factory called "
           "build/make/... its file's)", REQUEST),
    Option("labels_file", ("--labels-file",), "own",
           "its classes, one per line (checked against its output; default: the task family's)", REQUEST,
           metavar="FILE", path=True),
    Option("mean", ("--mean",), "own", "per-channel mean after scaling pixels to 0-1 (default: the task family's)",
           REQUEST, metavar="R,G,B"),
    Option("std", ("--std",), "own", "per-channel std (default: the task family's)", REQUEST, metavar="R,G,B"),
    Option("fit", ("--fit",), "own", "how a photo becomes its square input (default: the task family's)", REQUEST,
           choices=("crop", "letterbox", "stretch")),
    # targets
    Option("target", ("--target", "--platform"), "targets",
           "a platform's backends in its priority order ({platforms})", REQUEST, choices="platform_names"),
    Option("backends", ("--backends",), "targets",
           "targets: BACKEND[+BACKEND...][:PRECISION], e.g. xnnpack coreml vulkan+xnnpack xnnpack:int8; backends: "
           "{backends} (default: every backend that can lower here)", REQUEST, kind="list", metavar="TARGET"),
    # precision
    Option("precision", ("--precision",), "precision",
           "precision of targets that name none (fp32, fp16, int8, int8-dynamic, int8-weight, int4-weight), or auto: "
           "for each backend that runs here, try every precision it takes and pick the fastest within "
           "--accuracy-budget", REQUEST, metavar="auto|PRECISION"),
    Option("accuracy_budget", ("--accuracy-budget",), "precision",
           "what a quantized artifact may lose against fp32 eager on the validation photos, and what auto chooses "
           "within (default: top1=0.99 for classifiers, boxes=0.95 matched at IoU 0.5 for detectors, sqnr=20 "
           "otherwise; and ids=0.99 of integer outputs' values equal to eager's, for every model); one that misses "
           "it is told where it breaks", RUN, metavar="top1=F,boxes=F,sqnr=DB,ids=F",
           convert="budget"),
    Option("offer_out_of_budget", ("--offer-out-of-budget",), "precision",
           "offer the app artifacts that ran and matched but miss their --accuracy-budget (OUT_OF_BUDGET; never "
           "proven, listed after every other artifact); by default they stay on disk and in the manifest's "
           "outOfBudget, which the app does not read", RUN, False, "flag"),
    Option("accuracy_report", ("--accuracy-report",), "precision",
           "for every quantized artifact, print the layers that lose most against fp32 (by eager module) and what to "
           "try; report.html shows them too", REQUEST, False, "flag"),
    Option("calibration", ("--calibration",), "precision",
           "calibrate quantized targets on the images in DIR, through the model's own preprocessing (default for image "
           "models: views of the photos our dependencies ship), or on the input files in DIR (.npy or .npz, one sample "
           "a file, any model), verifying on files calibration did not use", ARTIFACT, metavar="DIR",
           field="calibration_dir", convert="absolute", path=True),
    Option("calibration_samples", ("--calibration-samples",), "precision",
           "inputs used to calibrate quantized targets (default 16)", ARTIFACT, 16, type=int, metavar="N"),
    # output and proof
    Option("out", ("--out",), "output", "output directory (default: models)", RUN, "models", metavar="DIR",
           field="out_dir", convert="path", required=True, path=True, jobs=True),
    Option("weights", ("--weights",), "output",
           "pretrained (library download; a --model checkpoint: its own weights), none (seeded random init) or a local "
           "state dict (or an Ultralytics checkpoint of the same architecture)", ARTIFACT, "pretrained",
           metavar="pretrained|none|PATH", path=True),
    Option("seed", ("--seed",), "output", "seed for random weights and inputs (default 0)", ARTIFACT, 0, type=int),
    Option("verify", ("--no-verify",), "output", "skip running artifacts on this host", ARTIFACT, True, "off"),
    Option("simulate", ("--no-simulate",), "output",
           "do not prove on reference simulators what this host cannot run (TOSA, Ethos-U, Cortex-M): those rows need "
           "a device", ARTIFACT, True, "off"),
    Option("fallback", ("--no-fallback",), "output",
           "fail a target when a backend's pass crashes on part of the graph (default: that part runs on the portable "
           "kernels, the rest stays delegated, and the summary says so)", ARTIFACT, True, "off"),
    Option("dry_run", ("--dry-run",), "output",
           "check the options and print the plan (models, targets, downloads), then stop: nothing is written",
           REQUEST, False, "flag", file=False),
    Option("archive_limit_gb", ("--archive-limit-gb",), "output",
           "the most an archive member (a .pt2's, a TorchScript file's, an .npz's, ONNX external data) may declare, "
           "and the members together, in GiB, judged before anything is inflated (default 4 and 8; as "
           "PTEFORGE_ARCHIVE_LIMIT_GB)", REQUEST, type=float, metavar="GB"),
    Option("verify_inputs", ("--verify-inputs",), "output",
           "inputs besides the example input used to verify (default 3): seeded, or the input files of --calibration "
           "DIR that calibration does not use", ARTIFACT, 3, type=int, metavar="N"),
    Option("bench_runs", ("--bench-runs",), "output",
           "timed runs after warm-up of each artifact that runs here, for its p50 (default 10, fewer for one slower "
           "than 0.1 s a run, at least 5; 0: none)", RUN, 10, type=int, metavar="N"),
    Option("tolerance", ("--tolerance",), "output", "minimum SQNR in dB against eager (default depends on precision)",
           ARTIFACT, type=float, metavar="DB"),
    Option("base_url", ("--base-url",), "output", "make remoteUrl absolute under URL", RUN, metavar="URL"),
    Option("timeout", ("--timeout",), "output",
           "seconds per model capture and per target before its worker is killed (default 1200)", RUN, 1200.0,
           type=float, metavar="S", jobs=True),
    Option("jobs", ("--jobs",), "output",
           "worker processes (default: one per core; with --executor ray: the local cluster's CPUs)", RUN, type=int,
           metavar="N"),
    Option("executor", ("--executor",), "output",
           "local: worker processes on this machine (default); ray: each capture and (model, target) job as a Ray "
           "task (pteforge[ray])", RUN, "local", choices=("local", "ray")),
    Option("ray_address", ("--ray-address",), "output",
           "with --executor ray: the cluster to use, e.g. 10.0.0.5:6379 (default: start a local one)", RUN,
           metavar="ADDR"),
    Option("oplist", ("--oplist",), "output",
           "selective build: selected_operators.yaml per artifact and merged, plus executorch_link.cmake", RUN, False,
           "flag"),
    Option("cache", ("--no-cache",), "output",
           "do the work even when the cache holds this exact artifact (the result is cached anyway)", RUN, True, "off"),
    Option("prove_on", ("--prove-on",), "output",
           "also prove every XNNPACK and portable program on another instruction set: arm64 runs it with "
           "ExecuTorch's aarch64 runtime under emulation (qemu-user; fp16 arithmetic and dot products as phones "
           "compute them), judged as on this host and shown beside its verdict; about 10 s to start plus the "
           "emulated runs (docs/arm64.md); needs `pteforge setup arm64` once", RUN, kind="list", choices=("arm64",),
           metavar="ISA"),
    Option("bundle", ("--bundle",), "output",
           "also write a BundledProgram (.bpte) with verification inputs and expected outputs", ARTIFACT, False, "flag"),
    # publishing
    Option("publish", ("--publish",), "publishing",
           "after the export, lay out SITE/versions.json and SITE/<version>/index.json as the executorch_flutter app "
           "fetches them (as pteforge publish OUT --site SITE)", REQUEST, metavar="SITE", path=True),
    Option("publish_runtime", ("--publish-runtime", "--publish-version"), "publishing",
           "the app runtimes' ExecuTorch versions to publish for (as publish --runtime)", REQUEST, kind="list",
           metavar="V"),
    Option("publish_base_url", ("--publish-base-url",), "publishing", "the URL SITE is served at", REQUEST,
           metavar="URL"),
    Option("publish_relative", ("--publish-relative",), "publishing",
           "publish without --publish-base-url: remoteUrl stays relative on purpose", REQUEST, None, "flag"),
    # not a flag of export: the global --debug
    Option("debug", (), "output", "show tracebacks", RUN, False, "flag", file=False, jobs=True),
)


def option(name: str) -> Option:
    return next(o for o in OPTIONS if o.name == name)


def config_fields() -> tuple[Option, ...]:
    """The options ``ExportConfig`` holds, the required one first."""
    held = [o for o in OPTIONS if o.role in (ARTIFACT, RUN)]
    return tuple(sorted(held, key=lambda o: not o.required))
