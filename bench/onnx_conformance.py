"""ONNX's own conformance tests through pteforge, ONNX Runtime beside it as the anchor.

The onnx wheel ships its backend node tests (``onnx/backend/test/data/node``: 1,678 cases,
each a one-node ``model.onnx`` with ``test_data_set_0/input_*.pb`` and ``output_*.pb``).
This runs every case of the operators real models use (``OPS``: those of the ONNX files in
``bench/elsewhere_models.py``, what today's exporters write for vision, audio and text
models, and issue 68's list), each through the path a user's ``--model file.onnx`` takes:

    onnx_spec -> build_onnx_named (onnx2torch + pteforge's converters) -> torch.export
    (pteforge's export_model, saved and loaded as .pt2) -> XNNPACK fp32 lowering (what
    XNNPACK does not take stays on the portable kernels) -> .pte run by ExecuTorch's runtime

and compares the program's outputs with the case's expected outputs at ONNX's own backend
test tolerance (``RTOL``, ``ATOL``: onnx.backend.test.runner's defaults). ONNX Runtime runs
the same prepared file on the same inputs in the same run.

A case is prepared as exporters write files: the inputs they store as constants
(``CONSTANT_INPUTS``: weights, sizes, scales, roi, axes, pads, split sizes, shapes, bounds,
clip limits, gather indices) become initializers holding the case's values; the others stay inputs.

Left out, and counted as such in the JSON: the ``_expanded`` variants (the same case written
as the operator's function body); cases whose inputs or outputs have types a .pte does not
take (strings, sequences, optionals, float8, int4, bfloat16); and cases whose operator
inputs are all constants once prepared (a program with no input: ConstantOfShape, Range).
Control flow (If, Loop, Scan), training and random operators are not in ``OPS``.

``--stage convert`` measures a converter alone (``--converter onnx2torch | pteforge |
onnx2pytorch | onnx2tf``): the converted module's eager outputs against the expected ones,
and whether torch.export captures it. The other converters run in an environment of their
own (``--python``), as they pin other onnx versions.

    uv run --locked python bench/onnx_conformance.py                     # the full path
    uv run --locked python bench/onnx_conformance.py --stage convert     # pteforge's converter alone
    python bench/onnx_conformance.py --stage convert --converter onnx2pytorch --python /tmp/env/bin/python
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPS = (
    # zoo models' operators (nudenet, ddddocr, PP-OCR, PicoDet, PP-LCNet, magika, silero-vad, basic-pitch)
    "Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape", "Conv",
    "ConvTranspose", "Div", "Equal", "Exp", "Expand", "Gather", "Gemm", "GlobalAveragePool", "GlobalMaxPool",
    "HardSigmoid", "HardSwish", "Identity", "LSTM", "Log", "MatMul", "Max", "MaxPool", "Mul", "Neg", "Not", "Pad",
    "Pow", "Range", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum", "Relu", "Reshape", "Resize",
    "Shape", "Sigmoid", "Size", "Slice", "Softmax", "Split", "Sqrt", "Squeeze", "Sub", "Tanh", "Transpose",
    "Unsqueeze", "Where",
    # what today's exporters write for transformers, audio and quantized models (issue 68)
    "Attention", "RMSNormalization", "LayerNormalization", "ConvInteger", "CumSum", "GRU", "Gelu", "Erf", "Flatten",
    "LeakyRelu", "Min", "Abs", "InstanceNormalization", "PRelu", "Tile", "ArgMax", "TopK",
)

# inputs (by position) that exporters store as constants: weights, and the numbers a graph's shape needs
CONSTANT_INPUTS = {
    "Resize": (1, 2, 3), "Pad": (1, 2, 3), "Slice": (1, 2, 3, 4), "Split": (1,), "Reshape": (1,), "Expand": (1,),
    "Squeeze": (1,), "Unsqueeze": (1,), "ReduceMax": (1,), "ReduceMean": (1,), "ReduceMin": (1,), "ReduceSum": (1,),
    "CumSum": (1,), "Clip": (1, 2), "Tile": (1,), "TopK": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Conv": (1, 2), "ConvTranspose": (1, 2), "ConvInteger": (1, 2, 3), "Gemm": (1, 2),
    "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2), "LayerNormalization": (1, 2),
    "RMSNormalization": (1,), "PRelu": (1,), "GRU": (1, 2, 3), "LSTM": (1, 2, 3, 7), "Gather": (1,),
}

RTOL, ATOL = 1e-3, 1e-7  # onnx.backend.test.runner's defaults
FEEDABLE = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool", 10: "float16",
            11: "float64"}
NODE_TESTS = "onnx/backend/test/data/node"
TIMEOUT = 180  # seconds a case may take


def node_tests() -> Path:
    import onnx

    return Path(onnx.__file__).parent.parent / NODE_TESTS


def cases(ops=OPS) -> tuple[list[tuple[str, str, int]], dict[str, int]]:
    """(case folder, operator, its opset) of ``ops``' node tests, and what was left out, by why."""
    import onnx

    chosen, left = [], collections.Counter()
    for folder in sorted(node_tests().iterdir()):
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        op = model.graph.node[0].op_type if len(model.graph.node) == 1 else None
        if op not in ops:
            continue
        if folder.name.endswith("_expanded"):
            left["expanded (the operator's function body)"] += 1
            continue
        values = [*model.graph.input, *model.graph.output]
        if any(v.type.WhichOneof("value") != "tensor_type" or v.type.tensor_type.elem_type not in FEEDABLE
               for v in values):
            left["types a .pte does not take (string, sequence, optional, float8, int4, bfloat16)"] += 1
            continue
        node = model.graph.node[0]
        constant = {node.input[i] for i in CONSTANT_INPUTS.get(op, ()) if i < len(node.input)}
        if all(v.name in constant for v in model.graph.input):
            left["every input a constant (a program with no input)"] += 1
            continue
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        chosen.append((str(folder), op, opset))
    return chosen, dict(left)


def prepared(folder: str):
    """The case as an exporter writes it: (model, feeds by input name, expected outputs)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(Path(folder) / "model.onnx"))
    data = Path(folder) / "test_data_set_0"
    values = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(data.glob("input_*.pb"),
                                                                              key=lambda p: int(p.stem[6:]))]
    expected = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(data.glob("output_*.pb"),
                                                                                key=lambda p: int(p.stem[7:]))]
    node = model.graph.node[0]
    constant = {node.input[i] for i in CONSTANT_INPUTS.get(node.op_type, ()) if i < len(node.input) and node.input[i]}
    feeds, kept = {}, []
    for value, array in zip(list(model.graph.input), values):
        if value.name in constant:
            model.graph.initializer.append(numpy_helper.from_array(array, value.name))
        else:
            feeds[value.name] = array
            kept.append(value)
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model, feeds, expected


def agrees(expected: list, actual: list) -> str | None:
    """None when ``actual`` is ``expected`` (count, shapes, dtypes, values at RTOL/ATOL); else why not, in a line."""
    import numpy as np

    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (e, a) in enumerate(zip(expected, actual)):
        a = np.asarray(a)
        if tuple(a.shape) != tuple(e.shape):
            return f"output {i} of shape {list(a.shape)}, expected {list(e.shape)}"
        if a.dtype != e.dtype:
            return f"output {i} is {a.dtype}, expected {e.dtype}"
        if e.dtype.kind in "fc":
            bad = ~np.isclose(a, e, rtol=RTOL, atol=ATOL, equal_nan=True)
            if bad.any():
                worst = float(np.nanmax(np.abs(a.astype(np.float64) - e)[bad]))
                return f"output {i}: {int(bad.sum())} of {e.size} values off (max abs {worst:.3g})"
        elif not np.array_equal(a, e):
            return f"output {i}: {int((a != e).sum())} of {e.size} values differ"
    return None


def ort_outcome(model, feeds: dict, expected: list) -> str | None:
    """ONNX Runtime on the prepared case: None when it passes, else why not."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return agrees(expected, session.run(None, feeds))
    except Exception as exc:  # noqa: BLE001 - its own words are the cause
        return one_line(exc)


def one_line(exc: BaseException, width: int = 240) -> str:
    return f"{type(exc).__name__}: {tidy(' '.join(str(exc).split()) or type(exc).__name__)}"[:width]


def tidy(text: str) -> str:
    """A cause without the case's temporary path, and for an import the converter's own
    words (onnx2torch's, for the last graph pteforge tried)."""
    import re

    text = re.sub(r"'?/tmp/[^ ']*case\.onnx'?:? ?", "", text)
    tried = [t for t in re.findall(r"the graph (?:folded|as given) at opset \d+: ([^;]*)", text) if t.strip()]
    return re.sub(r"onnx2torch cannot import .*", lambda _: tried[-1].strip(), text) if tried else text


def pteforge_outcome(model, feeds: dict, expected: list, stage: str, tmp: Path) -> str | None:
    """The case through pteforge's import path (``stage`` "convert": up to torch.export;
    "all": to the .pte run by ExecuTorch): None when it passes, else the stage and cause."""
    import onnx
    import torch

    from pteforge.models.onnx.build import build_onnx_named
    from pteforge.models.onnx.spec import onnx_spec
    from pteforge.stages.capture import export_model, flatten_outputs

    path = tmp / "case.onnx"
    onnx.save(model, str(path))
    inputs = tuple(torch.from_numpy(feeds[v.name].copy()) for v in model.graph.input)
    steps = {}
    try:
        steps["import"] = lambda: build_onnx_named(onnx_spec(str(path)), "random", 0)
        module = steps.pop("import")()
        with torch.no_grad():
            eager = [t.numpy() for t in flatten_outputs(module(*inputs))]
        if stage == "convert" and (why := agrees(expected, eager)):
            return f"eager: {why}"
        exported = export_model(module, inputs)
    except Exception as exc:  # noqa: BLE001 - the cause is the result
        return f"{'capture' if 'module' in locals() else 'import'}: {one_line(exc)}"
    if stage == "convert":
        return None
    return _lowered_outcome(exported, inputs, expected, tmp)


def _lowered_outcome(exported, inputs: tuple, expected: list, tmp: Path) -> str | None:
    import torch

    from pteforge.backends import default_registry
    from pteforge.core.spec import Precision
    from pteforge.stages.lower import fast_fx, lower
    from pteforge.stages.verify import run_program

    try:
        torch.export.save(exported, str(tmp / "case.pt2"))  # as the pipeline keeps the capture
        exported = torch.export.load(str(tmp / "case.pt2"))
        xnnpack = default_registry().get("xnnpack")
        plan = xnnpack.plan(Precision.FP32)
        with fast_fx():
            exported = xnnpack.prepare(exported, Precision.FP32, inputs)
            edge = lower(exported, [xnnpack], Precision.FP32, plan)
            data = bytes(edge.to_executorch(plan.executorch_config).buffer)
    except Exception as exc:  # noqa: BLE001
        return f"lower: {one_line(exc)}"
    try:
        actual = run_program(data, [list(inputs)])[0]
    except Exception as exc:  # noqa: BLE001
        return f"run: {one_line(exc)}"
    why = agrees(expected, [t.numpy() if isinstance(t, torch.Tensor) else t for t in actual])
    return f"mismatch: {why}" if why else None


def other_outcome(converter: str, model, feeds: dict, expected: list) -> str | None:
    """``converter``'s module alone: eager outputs against the expected ones, then torch.export."""
    import torch

    inputs = tuple(torch.from_numpy(feeds[v.name].copy()) for v in model.graph.input)
    try:
        module = CONVERTERS[converter](model)
        with torch.no_grad():
            out = module(*inputs)
        out = list(out.values()) if isinstance(out, dict) else list(out) if isinstance(out, (list, tuple)) else [out]
        if why := agrees(expected, [o.detach().numpy() if isinstance(o, torch.Tensor) else o for o in out]):
            return f"eager: {why}"
    except Exception as exc:  # noqa: BLE001
        return f"import: {one_line(exc)}"
    try:
        torch.export.export(module, inputs)
    except Exception as exc:  # noqa: BLE001
        return f"capture: {one_line(exc)}"
    return None


def _onnx2torch(model):
    from onnx2torch import convert

    return convert(model).eval()


def _onnx2pytorch(model):
    from onnx2pytorch import ConvertModel

    return ConvertModel(model, experimental=True).eval()


def _onnx2tf(model):
    """onnx2tf's native PyTorch package (``flatbuffer_direct_output_pytorch``), imported."""
    import importlib

    import onnx
    import onnx2tf

    name = f"case{next(_COUNTER)}"
    folder = Path(tempfile.mkdtemp(prefix="onnx2tf-"))
    onnx.save(model, str(folder / f"{name}.onnx"))
    onnx2tf.convert(input_onnx_file_path=str(folder / f"{name}.onnx"), output_folder_path=str(folder),
                    tflite_backend="flatbuffer_direct", flatbuffer_direct_output_pytorch=True, non_verbose=True)
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(f"{name}_pytorch").load_model().eval()
    finally:
        sys.path.remove(str(folder))


_COUNTER = itertools.count()


CONVERTERS = {"onnx2torch": _onnx2torch, "onnx2pytorch": _onnx2pytorch, "onnx2tf": _onnx2tf}


def worker(converter: str, stage: str) -> None:
    """Answer each case folder read from stdin with one JSON line: the ORT and the converter's outcomes
    (on the original stdout: what converters print goes to stderr)."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    with tempfile.TemporaryDirectory(prefix="onnx-conformance-") as tmp:
        for line in sys.stdin:
            folder = line.strip()
            t0 = time.perf_counter()
            model, feeds, expected = prepared(folder)
            ort = ort_outcome(model, feeds, expected)
            if converter == "pteforge":
                mine = pteforge_outcome(model, feeds, expected, stage, Path(tmp))
            else:
                mine = other_outcome(converter, model, feeds, expected)
            print(json.dumps({"case": folder, "ort": ort, "mine": mine, "s": round(time.perf_counter() - t0, 2)}),
                  file=answers, flush=True)


class Worker:
    """One worker process; restarted after a case crashes it or runs past ``TIMEOUT``."""

    def __init__(self, python: str, converter: str, stage: str):
        self.argv = [python, __file__, "--worker", "--converter", converter, "--stage", stage]
        self.proc = None

    def run(self, folder: str) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True, env=env)
        self.proc.stdin.write(folder + "\n")
        self.proc.stdin.flush()
        chooser = selectors.DefaultSelector()
        chooser.register(self.proc.stdout, selectors.EVENT_READ)
        ready = chooser.select(TIMEOUT + 60)  # the first case also imports torch and ExecuTorch
        line = self.proc.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        cause = "crashed the process" if self.proc.poll() is not None else f"took over {TIMEOUT} s"
        self.stop()
        return {"case": folder, "ort": "not run", "mine": f"crash: the case {cause}", "s": None}

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def by_op(results: list[dict], chosen: list[tuple[str, str, int]]) -> dict:
    """Per operator: cases, ONNX Runtime's passes, pteforge's passes (of those), and each failure in one line."""
    ops: dict = {}
    for (folder, op, opset), r in zip(chosen, results):
        row = ops.setdefault(op, {"cases": 0, "ort_passes": 0, "passes": 0, "passes_where_ort_fails": 0, "failures": []})
        row["cases"] += 1
        name = Path(folder).name
        if r["ort"] is None:
            row["ort_passes"] += 1
            if r["mine"] is None:
                row["passes"] += 1
            else:
                row["failures"].append(f"{op}-{opset} {name}: {tidy(r['mine'])}")
        elif r["mine"] is None:
            row["passes_where_ort_fails"] += 1
    return dict(sorted(ops.items()))


def run_all(chosen: list, args, progress=None) -> list[dict]:
    """Each case's outcome, in order, from ``args.jobs`` workers; ``progress(results)`` every
    25 cases (None where a case has not run yet)."""
    import queue
    import threading

    todo, results, lock = queue.Queue(), [None] * len(chosen), threading.Lock()
    for i, case in enumerate(chosen):
        todo.put((i, case))

    def drain():
        runner = Worker(args.python, args.converter, args.stage)
        try:
            while True:
                try:
                    i, (folder, _, _) = todo.get_nowait()
                except queue.Empty:
                    return
                r = results[i] = runner.run(folder)
                with lock:
                    done = sum(x is not None for x in results)
                    print(f"[{done}/{len(chosen)}] {Path(folder).name}: ort {'ok' if r['ort'] is None else 'FAIL'}, "
                          f"{args.converter} {'ok' if r['mine'] is None else r['mine'][:150]}", flush=True)
                    if progress and done % 25 == 0:
                        progress(results)
        finally:
            runner.stop()

    threads = [threading.Thread(target=drain) for _ in range(max(args.jobs, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--converter", default="pteforge", choices=["pteforge", *CONVERTERS])
    parser.add_argument("--stage", default="all", choices=["all", "convert"])
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the converter's environment")
    parser.add_argument("--ops", default="", help="comma-separated operators (default: OPS)")
    parser.add_argument("--jobs", type=int, default=2, help="workers running cases side by side")
    parser.add_argument("--per-op", type=int, default=0, help="only the first N cases of each operator (a sample)")
    parser.add_argument("-k", default="", help="only cases whose folder name holds this")
    parser.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    parser.add_argument("--merge", action="store_true", help="replace the operators run in --out's results, keep the rest")
    parser.add_argument("--table", action="store_true", help="print the markdown table of --out's results and stop")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.converter, args.stage)
        return 0
    if args.table:
        print(table(json.loads(Path(args.out).read_text())))
        return 0
    chosen, left = cases(tuple(args.ops.split(",")) if args.ops else OPS)
    chosen = [c for c in chosen if args.k in Path(c[0]).name]
    if args.per_op:
        taken = collections.Counter()
        chosen = [c for c in chosen if (taken.update([c[1]]) or taken[c[1]] <= args.per_op)]
    rank = collections.Counter()
    chosen = sorted(chosen, key=lambda c: (rank.update([c[1]]) or rank[c[1]], c[1]))  # every op's first case, then
    t0 = time.perf_counter()  # every op's second, ...: a run stopped early has covered each operator alike

    def progress(results):  # what has run so far, written as it goes
        ran = [(c, r) for c, r in zip(chosen, results) if r is not None]
        write(args, [c for c, _ in ran], left, [r for _, r in ran], time.perf_counter() - t0, partial=True)

    results = run_all(chosen, args, progress)
    summary = write(args, chosen, left, results, time.perf_counter() - t0)
    print(json.dumps(summary["total"]))
    return 0


def table(summary: dict) -> str:
    """The per-operator table of a run's JSON, in markdown: cases, ONNX Runtime's passes, pteforge's."""
    rows = ["| operator | cases | ONNX Runtime passes | pteforge passes | failures (of ONNX Runtime's passes) |",
            "|---|---|---|---|---|"]
    for op, r in summary["ops"].items():
        causes = collections.Counter(f.split(": ", 1)[1].split(":")[0] for f in r["failures"])
        said = ", ".join(f"{n} {cause}" for cause, n in causes.most_common()) or ""
        rows.append(f"| {op} | {r['cases']} | {r['ort_passes']} | {r['passes']} | {said} |")
    t = summary["total"]
    rows.append(f"| **all** | **{t['cases']}** | **{t['ort_passes']}** | **{t['passes']}** | "
                f"**{t['percent_of_ort']} %** of ONNX Runtime's passes |")
    return "\n".join(rows)


def write(args, chosen: list, left: dict, results: list[dict], seconds: float, partial: bool = False) -> dict:
    import platform

    ops = by_op(results, chosen)
    if getattr(args, "merge", False) and Path(args.out).exists():  # the operators run now replace theirs
        before = json.loads(Path(args.out).read_text())
        ops = dict(sorted({**before["ops"], **ops}.items()))
        left, seconds = before["left_out"], before["seconds"]
    for row in ops.values():
        row["failures"] = [tidy(f) for f in row["failures"]]
    ort = sum(r["ort_passes"] for r in ops.values())
    mine = sum(r["passes"] for r in ops.values())
    summary = {
        "converter": args.converter, "stage": args.stage, "tolerance": {"rtol": RTOL, "atol": ATOL},
        "cpu": platform.processor() or platform.machine(), "seconds": round(seconds),
        "total": {"cases": sum(r["cases"] for r in ops.values()), "ort_passes": ort, "passes": mine,
                  "percent_of_ort": round(100 * mine / ort, 1) if ort else None},
        "left_out": left, "ops": ops, **({"partial": "the run so far: not every case has run"} if partial else {}),
    }
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    sys.exit(main())
