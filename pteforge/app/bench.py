"""``pteforge bench``: how fast each artifact that runs here is, in a child process.

Per artifact: load time, first run, p50 and p90 over ``runs`` after ``warmup``, peak
RSS and threads; ``--compare eager`` times the eager PyTorch model on the same input
in the same run (and ONNX Runtime when it is installed: on the user's own file for a model
of an ONNX file, ``time_theirs``). Results go into the manifest (``bench``) and the reports.
"""

from __future__ import annotations

import importlib.util
import io
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..backends import program_check
from ..core.errors import one_line
from ..core.io import differs
from ..core.result import Status, estimate_text
from ..core.spec import input_highs
from ..core.timing import measure
from ..models.onnx.reference import OnnxReference
from ..report.manifest import ModelEntry
from ..runtime.host import Host
from ..runtime.isolate import ChildCrashed, IsolatedRuntime
from .validate import EagerCache, discover, seeded_inputs


@dataclass
class BenchResult:
    file: str
    status: Status | None = None  # None: measured; else why not (NOT_RUNNABLE_HERE, LOAD_FAILED, RUN_FAILED)
    reason: str | None = None
    numbers: dict = field(default_factory=dict)
    eager: dict | None = None
    onnxruntime: dict | None = None
    entry_name: str | None = None
    manifest_dir: Path | None = None
    simulated: bool = False  # not runnable here, and proven at export on its reference simulator
    recorded_in: Path | None = None  # the manifest whose entry's ``bench`` these numbers replaced


def time_eager(model, inputs, runs: int, warmup: int) -> dict:
    import torch

    with torch.no_grad():
        stats = measure(lambda: model(*inputs), runs, warmup)
    return {**stats, "threads": torch.get_num_threads()}


def bench(path: Path, runs: int = 20, warmup: int = 3, compare_eager: bool = False, on_file=None) -> list[BenchResult]:
    root = Path(path)
    items: list[tuple[Path, ModelEntry | None, Path | None]]
    if root.is_file():
        items = [(root.resolve(), None, None)]
    else:
        items = [t for t in discover(root) if t[0].suffix == ".pte"]
    eager = EagerCache()
    theirs: dict[tuple, tuple] = {}  # eager PyTorch and ONNX Runtime, timed once per model
    results = []
    with IsolatedRuntime() as child, tempfile.TemporaryDirectory(prefix="pteforge-bench-") as tmp:
        here = Host.from_dict(child.request("host"))
        for pte, entry, manifest_dir in items:
            res = BenchResult(str(pte), Status.RUN_FAILED, entry_name=entry.name if entry else None, manifest_dir=manifest_dir)
            try:
                if entry is not None and (why := differs(pte, entry.size, entry.hash)):
                    # not timed: its numbers would go into the entry of another program
                    res.status, res.reason = Status.LOAD_FAILED, f"the file {why}: not the program its manifest lists"
                else:
                    highs = input_highs(entry.inputs if entry else None)
                    res.status, res.reason, res.numbers, inputs = measure_artifact(child, pte, here, Path(tmp), runs,
                                                                                   warmup, highs)
                if res.status is Status.NOT_RUNNABLE_HERE and entry is not None and entry.status == Status.SIMULATED.value:
                    res.reason, res.simulated = _simulated_note(res.reason, entry), True
                if res.status is None and compare_eager and entry is not None:
                    key = (entry.base_model, entry.source, entry.weights, entry.seed, str(entry.inputShapes))
                    if key not in theirs:
                        theirs[key] = time_theirs(eager, entry, inputs, runs, warmup)
                    res.eager, res.onnxruntime = theirs[key]
            except ChildCrashed as exc:
                res.reason = f"the child process {exc}"
            results.append(res)
            if on_file:
                on_file(res)
    _record(results)
    return results


def time_theirs(eager: EagerCache, entry, inputs, runs: int, warmup: int) -> tuple[dict, dict | None]:
    """(eager PyTorch, ONNX Runtime) timed on ``inputs``. A model of an ONNX file: its
    PyTorch import (what was lowered) and ONNX Runtime on the file itself (``time_onnx_file``);
    any other: the model, and the model exported to ONNX (``time_onnxruntime``)."""
    try:
        model, spec = eager.get_with_spec(entry)
        if spec.source != "onnx":
            return time_eager(model, inputs, runs, warmup), time_onnxruntime(model, inputs, runs, warmup)
    except Exception as exc:  # noqa: BLE001 - e.g. pretrained weights offline
        return {"error": one_line(exc, 160)}, None
    ort = time_onnx_file(spec, inputs, runs, warmup)
    try:
        from ..stages.capture import build_model

        imported = build_model(spec, entry.weights or "pretrained", entry.seed or 0)
        return {**time_eager(imported, inputs, runs, warmup), "of": "its PyTorch import"}, ort
    except Exception as exc:  # noqa: BLE001 - the import's own failure; ONNX Runtime's figures stand
        return {"error": one_line(exc, 160), "of": "its PyTorch import"}, ort


def time_onnx_file(spec, inputs, runs: int, warmup: int) -> dict | None:
    """ONNX Runtime (CPU) timed on the model's own ONNX file, fed ``inputs`` (the program's,
    cast to the file's dtypes) and the values the export held its scalar inputs at; None
    when ONNX Runtime is not installed."""
    if importlib.util.find_spec("onnxruntime") is None:
        return None
    import numpy as np
    import onnxruntime as ort


    facts = {"version": ort.__version__, "of": f"the ONNX file itself ({Path(spec.path).name})"}
    try:
        ref = OnnxReference(spec.path, tuple(i for i in spec.inputs if i.value is not None))
        types = {i.name: i.type for i in ref.session.get_inputs()}
        feeds = {**ref.held, **{n: np.asarray(x.numpy(), dtype=_ORT_DTYPES.get(types[n], x.numpy().dtype))
                                for n, x in zip(ref.names, inputs)}}
        return {**measure(lambda: ref.session.run(None, feeds), runs, warmup), **facts}
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime's own refusal of the file or the feeds
        return {"error": one_line(exc, 160), **facts}


_ORT_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
               "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
               "tensor(bool)": "bool"}


def _simulated_note(reason: str, entry) -> str:
    """A simulated artifact's line: proven, but timed nowhere here; its compiler's estimates."""
    on = (entry.verification or {}).get("simulator") or "a reference simulator"
    note = f"{reason}; proven on {on} at export, which times nothing"
    return f"{note}; {estimate_text(entry.estimates)}" if entry.estimates else note


def measure_artifact(child, pte: Path, here: Host, tmp: Path, runs: int, warmup: int, highs: list | tuple = ()):
    """(status, reason, numbers, inputs) of one .pte timed in ``child`` on seeded inputs
    (``highs``: what its ids are drawn below, per input); status None when it was measured."""
    import torch

    info = child.request("inspect", path=str(pte))
    if not info["ok"]:
        return Status.LOAD_FAILED, info["error"], {}, None
    check = program_check(here, info["delegates"], info["operators"])
    if not check.ok:
        return check.not_here, check.reason, {}, None
    inputs = seeded_inputs(info["inputs"], 0, highs)
    torch.save([inputs], tmp / "in.pt")
    reply = child.request("bench", path=str(pte), inputs=str(tmp / "in.pt"), runs=runs, warmup=warmup)
    if not reply["ok"]:
        return Status.RUN_FAILED, reply["error"], {}, inputs
    numbers = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in reply.items() if k != "ok"}
    return None, None, numbers, inputs


def onnxruntime_runner(model, inputs) -> tuple[Callable[[], object] | None, dict] | None:
    """The model exported to ONNX, as a callable running it with ONNX Runtime (CPU) and its
    facts (version, or why it cannot run); None when ONNX Runtime is not installed."""
    if importlib.util.find_spec("onnxruntime") is None:
        return None
    import onnxruntime as ort
    import torch

    buf = io.BytesIO()
    try:
        with torch.no_grad():
            torch.onnx.export(model, tuple(inputs), buf, dynamo=False)
    except Exception as exc:  # not every model exports to ONNX
        return None, {"error": f"ONNX export failed: {type(exc).__name__}"}
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    feed = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    return (lambda: session.run(None, feed)), {"version": ort.__version__}


def time_onnxruntime(model, inputs, runs: int, warmup: int) -> dict | None:
    """The same model exported to ONNX and timed with ONNX Runtime (CPU), when installed."""
    runner = onnxruntime_runner(model, inputs)
    if runner is None:
        return None
    run, facts = runner
    return {**measure(run, runs, warmup), **facts} if run else facts


def _record(results: list[BenchResult]) -> None:
    """Write the numbers into each manifest's entries and regenerate its reports."""
    from ..report.manifest import update_entries
    from ..report.summary import last_run_failures, write_reports

    by_dir: dict[Path, dict[str, dict]] = {}
    for r in results:
        if r.status is None and r.entry_name and r.manifest_dir:
            numbers = {**r.numbers, **({"eager": r.eager} if r.eager else {}),
                       **({"onnxruntime": r.onnxruntime} if r.onnxruntime else {})}
            by_dir.setdefault(r.manifest_dir, {})[r.entry_name] = {"bench": numbers}
    for directory, fields in by_dir.items():
        manifest = update_entries(directory, fields)
        if manifest is not None:
            write_reports(directory, manifest, last_run_failures(directory))
            for r in results:
                if r.manifest_dir == directory and r.entry_name in fields:
                    r.recorded_in = Path(directory) / "index.json"
