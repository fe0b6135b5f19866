"""Recurrent layers on XNNPACK fp32 against eager PyTorch, side by side in one run.

    uv run --locked python bench/recurrent.py [--models speaker_lstm crnn_bilstm gru] [--runs 30] [--rounds 3]
                                             [--json bench/recurrent.json] [--out DIR] [--before DIR]

Three models a user brings (random weights, seed 0): a speaker encoder (3-layer LSTM,
40 mel bands over 40 steps, then a linear), a CRNN text recognizer (two conv blocks, a
bidirectional LSTM over 32 columns, a linear CTC head) and a 2-layer GRU over 50 steps.
Each is exported as a new user would (``pteforge export --model recurrent:NAME
--input-shape ... --weights none --backends xnnpack``; the export verifies the artifact
against eager), its wall time measured. Then its artifact is timed in one ExecuTorch
child (as ``pteforge bench`` does) and eager PyTorch in this process, each in its own
block, the blocks taking turns over ``--rounds`` rounds: a figure is the median of the
rounds' p50s. ``--before DIR``: the ``--out`` of a run on an earlier tree, whose
artifacts are timed in the same rounds (before and after, side by side). Eager runs with
torch's default threads and with one. Goal, per model: XNNPACK fp32 p50 / the faster
eager p50 ≤ 1.0, and the export command ≤ 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from artifact_latency import timed_rounds  # noqa: E402
from zoo import delegation  # noqa: E402

from pteforge.core.system import cpu_name  # noqa: E402

# name: (what it is, input shape)
MODELS = {
    "speaker_lstm": ("speaker encoder: LSTM(40, 256, 3 layers, batch_first) over 40 steps + linear", "1,40,40"),
    "crnn_bilstm": ("CRNN: 2 conv blocks + BiLSTM(512, 128) over 32 steps + linear CTC (37)", "1,1,32,128"),
    "gru": ("GRU(80, 128, 2 layers, batch_first) over 50 steps + linear", "1,50,80"),
}


class SpeakerLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(40, 256, 3, batch_first=True)
        self.proj = nn.Linear(256, 256)

    def forward(self, mels):  # [1, 40 steps, 40 bands]
        _, (h, _) = self.lstm(mels)
        return self.proj(h[-1])


class CRNN(nn.Module):
    def __init__(self, classes: int = 37):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.rnn = nn.LSTM(512, 128, bidirectional=True, batch_first=True)
        self.ctc = nn.Linear(256, classes)

    def forward(self, image):  # [1, 1, 32, 128]
        f = self.cnn(image)  # [1, 64, 8, 32]
        seq = f.permute(0, 3, 1, 2).reshape(f.shape[0], f.shape[3], -1)  # 32 columns of 512
        out, _ = self.rnn(seq)
        return self.ctc(out).log_softmax(-1)


class GRUModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(80, 128, 2, batch_first=True)
        self.head = nn.Linear(128, 10)

    def forward(self, x):  # [1, 50, 80]
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def speaker_lstm():
    return SpeakerLSTM()


def crnn_bilstm():
    return CRNN()


def gru():
    return GRUModel()


def export(name: str, out: Path) -> tuple[dict | str, float]:
    """Export one model with pteforge's CLI: (its XNNPACK entry, or why the export failed;
    wall seconds of the whole command)."""
    cmd = [sys.executable, "-m", "pteforge", "export", "--model", f"recurrent:{name}", "--weights", "none",
           "--no-cache", "--bench-runs", "0", "--input-shape", MODELS[name][1], "--backends", "xnnpack", "--out", str(out)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    manifest = out / "index.json"
    if not manifest.is_file():
        return f"export failed (exit {proc.returncode}): {''.join((proc.stderr or proc.stdout).strip().splitlines()[-1:])}", seconds
    entries = [e for e in json.loads(manifest.read_text())["models"] if e["target"] == "xnnpack"]
    return (entries[0] if entries else "no xnnpack entry"), seconds


def facts(entry: dict, seconds: float) -> dict:
    return {**delegation(entry), "export_command_s": round(seconds, 1),
            "stage_s": {k: round(v, 1) for k, v in (entry.get("timings") or {}).items()}}


def eager(name: str):
    """The eager model pteforge built (same factory, seed and weights) on its input, with
    torch's default threads (as ``pteforge bench --compare eager``) and with one: on a busy
    machine, eager's second thread waits for a core and one thread is the faster eager."""
    from pteforge.core.spec import InputSpec
    from pteforge.models.own import custom_spec
    from pteforge.models.synthetic import make_inputs
    from pteforge.stages.capture import build_model

    spec = custom_spec(f"recurrent:{name}", (InputSpec.parse(MODELS[name][1]),))
    model = build_model(spec, "none", 0).eval()
    inputs = list(make_inputs(spec, 0))

    def one_thread():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return model(*inputs)
        finally:
            torch.set_num_threads(threads)

    return [("eager", "fp32", lambda: model(*inputs)), ("eager 1 thread", "fp32", one_thread)]


def row(name: str, out: Path, child, here, tmp: Path, args) -> dict:
    print(f"{name}: exporting", flush=True)
    entry, seconds = export(name, out / name)
    if isinstance(entry, str):
        print(f"  {entry}")
        return {"model": MODELS[name][0], "failed": entry, "export_command_s": round(seconds, 1)}
    got = facts(entry, seconds)
    print(f"  {got['status']} in {seconds:.1f} s, {got['subgraphs']} subgraph(s), SQNR {got['sqnr_db']}", flush=True)
    ours = [("xnnpack", "fp32", out / name / entry["file"])] if entry["status"] == "VERIFIED" else []
    earlier = args.before / name / entry["file"] if args.before else None
    if earlier and earlier.is_file():  # the same model exported by an earlier tree, timed in the same rounds
        ours.append(("xnnpack before", "fp32", earlier))
    samples = timed_rounds(child, here, tmp, ours, eager(name), args.rounds, args.runs, args.warmup)
    p50 = {label: statistics.median(s["p50_ms"] for s in stats) for (label, _), stats in samples.items()}
    fastest = min(v for k, v in p50.items() if k.startswith("eager"))
    ratio = p50["xnnpack"] / fastest if "xnnpack" in p50 else None
    if "xnnpack before" in p50 and "xnnpack" in p50:
        got["after_over_before"] = p50["xnnpack"] / p50["xnnpack before"]
    print("  p50 " + ", ".join(f"{k} {v:.2f} ms" for k, v in p50.items())
          + (f", xnnpack / faster eager {ratio:.2f}" if ratio else ""), flush=True)
    if ours:
        got["xnnpack_weights_cache"] = cache = with_weights_cache(name, ours[0][2], args)
        if "on" in cache:
            cache["on_over_faster_eager"] = cache["on"]["p50_ms"] / fastest
            print(f"  weights cache off {cache['off']['p50_ms']:.2f} ms ({cache['off']['peak_rss_mb']} MB), "
                  f"on {cache['on']['p50_ms']:.2f} ms ({cache['on']['peak_rss_mb']} MB): "
                  f"on / faster eager {cache['on_over_faster_eager']:.2f}", flush=True)
    return {"model": MODELS[name][0], "input": MODELS[name][1], **got, "p50_ms": p50,
            "p50_per_round": {label: [round(s["p50_ms"], 3) for s in stats] for (label, _), stats in samples.items()},
            "xnnpack_over_faster_eager": ratio, "export_within_60_s": got["export_command_s"] <= 60}


def weights_cache_on() -> None:
    """Turn on the XNNPACK weights cache of this process's ExecuTorch runtime (before any
    program loads): ``executorch::runtime::set_option("XnnpackBackend",
    {weight_cache_enabled: true})``, which ExecuTorch 1.5.1's Python bindings do not expose,
    called through ctypes. The layout is that header's (runtime/backend/options.h): a
    ``char key[64]`` and a ``std::variant<bool, int, std::array<char, 256>>`` (libstdc++: 256
    bytes of storage, then the index byte); a Span is (pointer, length)."""
    import ctypes

    import executorch

    class Option(ctypes.Structure):
        _fields_ = [("key", ctypes.c_char * 64), ("storage", ctypes.c_char * 256), ("index", ctypes.c_ubyte),
                    ("pad", ctypes.c_ubyte * 3)]

    class Span(ctypes.Structure):
        _fields_ = [("data", ctypes.POINTER(Option)), ("length", ctypes.c_size_t)]

    lib = ctypes.CDLL(str(Path(list(executorch.__path__)[0]) / "lib" / "libexecutorch.so"))
    set_option = lib._ZN10executorch7runtime10set_optionEPKcNS0_4SpanINS0_13BackendOptionEEE
    set_option.restype, set_option.argtypes = ctypes.c_uint32, [ctypes.c_char_p, Span]
    option = Option(key=b"weight_cache_enabled", storage=b"\x01", index=0)  # the variant's bool, true
    error = set_option(b"XnnpackBackend", Span(ctypes.pointer(option), 1))
    if error:
        raise SystemExit(f"set_option(XnnpackBackend, weight_cache_enabled) returned Error {error}")


def time_pte(path: Path, runs: int, warmup: int, cache: bool) -> dict:
    """p50 of ``path``'s forward in this process (``--time-pte``), with the XNNPACK weights
    cache on or off, and the process's peak RSS after loading it."""
    import resource

    from executorch.runtime import Runtime

    from pteforge.core.timing import measure

    if cache:
        weights_cache_on()
    data = path.read_bytes()  # kept alive: the program reads from it
    method = Runtime.get().load_program(data).load_method("forward")
    inputs = [torch.from_numpy(a) for a in np.load(path.with_suffix(".inputs.npz")).values()]
    numbers = measure(lambda: method.execute(inputs), runs, warmup)
    outputs = [o.numpy() for o in method.execute(inputs) if isinstance(o, torch.Tensor)]
    np.savez(path.with_suffix(f".cache-{'on' if cache else 'off'}.npz"), *outputs)  # the two compared
    return {**numbers, "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def with_weights_cache(name: str, pte: Path, args) -> dict:
    """The artifact timed in fresh processes with the XNNPACK weights cache off and on, the
    two taking turns over the rounds: what an app that turns the cache on gets."""
    from pteforge.core.spec import InputSpec
    from pteforge.models.own import custom_spec
    from pteforge.models.synthetic import make_inputs

    spec = custom_spec(f"recurrent:{name}", (InputSpec.parse(MODELS[name][1]),))
    np.savez(pte.with_suffix(".inputs.npz"), *[t.numpy() for t in make_inputs(spec, 0)])
    got: dict[str, list] = {"off": [], "on": []}
    for _ in range(args.rounds):
        for mode in got:
            done = subprocess.run([sys.executable, __file__, "--time-pte", str(pte), "--weights-cache", mode,
                                   "--runs", str(args.runs), "--warmup", str(args.warmup)],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(HERE)})
            if done.returncode:
                return {"error": f"weights cache {mode}: exit {done.returncode}: {done.stderr.strip()[-300:]}"}
            got[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    off, on = (np.load(pte.with_suffix(f".cache-{mode}.npz")) for mode in got)
    return {**{mode: {"p50_ms": statistics.median(n["p50_ms"] for n in rounds),
                      "peak_rss_mb": max(n["peak_rss_mb"] for n in rounds)} for mode, rounds in got.items()},
            "max_abs_difference": max(float(np.abs(off[k] - on[k]).max()) for k in off.files)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), metavar="NAME")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="where the artifacts go (default: a temporary directory)")
    ap.add_argument("--json", type=Path, default=HERE / "recurrent.json")
    ap.add_argument("--before", type=Path, default=None,
                    help="the --out of this bench run on an earlier tree: its artifacts are timed beside these")
    ap.add_argument("--time-pte", type=Path, default=None, help=argparse.SUPPRESS)  # with_weights_cache's child
    ap.add_argument("--weights-cache", choices=["on", "off"], default="off", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.time_pte:
        print(json.dumps(time_pte(args.time_pte, args.runs, args.warmup, args.weights_cache == "on")))
        return 0

    from pteforge.runtime.host import Host
    from pteforge.runtime.isolate import IsolatedRuntime

    out = args.out or Path(tempfile.mkdtemp(prefix="pteforge-recurrent-"))
    head = {"cpu": cpu_name(), "cores": os.cpu_count(), "torch_threads_eager": torch.get_num_threads(),
            "runs": args.runs, "rounds": args.rounds, "load_average_at_start": [round(v, 1) for v in os.getloadavg()]}
    print(f"{head['cpu']}, {head['cores']} cores; eager with {head['torch_threads_eager']} torch threads; "
          f"median over {args.rounds} rounds of {args.runs}-run p50s (ms)", flush=True)
    if args.json.is_file():  # the figures of the tree before pteforge's own steps (PyTorch's decomposition) stay
        head["before"] = json.loads(args.json.read_text()).get("before")
    rows = {}
    with IsolatedRuntime() as child, tempfile.TemporaryDirectory(prefix="pteforge-recurrent-bench-") as tmp, torch.no_grad():
        here = Host.from_dict(child.request("host"))
        for name in args.models:
            rows[name] = row(name, out, child, here, Path(tmp), args)
            args.json.write_text(json.dumps({**head, "rows": rows}, indent=2) + "\n")  # kept as it goes
    head["load_average_at_end"] = [round(v, 1) for v in os.getloadavg()]
    args.json.write_text(json.dumps({**head, "rows": rows}, indent=2) + "\n")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
