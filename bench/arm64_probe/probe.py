"""Run .pte programs on the host and under qemu-aarch64 (-cpu max), compare, time.

    .venv/bin/python bench/arm64_probe/probe.py [--root DIR] [--runs N] PTE [PTE ...]

For each program: seeded inputs from its method meta (the same .npz both ways), run_pte.py
with this python (reference) and with the emulated aarch64 CPython of setup.sh, SQNR
host-vs-arm64 over all outputs, start-up and per-inference times. One JSON line per program
and a table at the end. Everything CPU-heavy runs under `nice -n 19`.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "run_pte.py")
# ExecuTorch ScalarType codes -> numpy
DTYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16,
          6: np.float32, 7: np.float64, 11: np.bool_}


def make_inputs(pte, path, seed=0):
    import torch  # noqa: F401  (loads libtorch before the pybindings, as portable_lib does)
    from executorch.extension.pybindings import _C

    with open(pte, "rb") as f:
        data = f.read()
    module = _C._load_for_executorch_from_buffer(data)  # MethodMeta borrows from both
    meta = module.method_meta("forward")
    rng = np.random.default_rng(seed)
    arrays = {}
    for i in range(meta.num_inputs()):
        t = meta.input_tensor_meta(i)
        dt = DTYPES[int(t.dtype())]
        x = rng.standard_normal(tuple(t.sizes()))
        arrays[f"input_{i}"] = (x if np.issubdtype(dt, np.floating) else np.abs(x) * 4).astype(dt)
    np.savez(path, **arrays)
    del meta, module, data


def sqnr(ref, out):
    ref = np.concatenate([r.astype(np.float64).ravel() for r in ref])
    out = np.concatenate([o.astype(np.float64).ravel() for o in out])
    noise = np.sum((ref - out) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(ref ** 2) / noise))


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(["nice", "-n", "19", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"rc={p.returncode}: {p.stderr.strip().splitlines()[-3:]}")
    info = json.loads(p.stdout.strip().splitlines()[-1])
    info["wall_s"] = round(wall, 2)
    return info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ptes", nargs="+")
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/pteforge-arm64-probe"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpu", default="max,sme=off")  # plain max: SME int8 is wrong (see setup.sh)
    ap.add_argument("--api", default="pybind")
    ap.add_argument("--work", default="/tmp/arm64probe-io")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    root = os.path.join(a.root, "root")
    env_arm = ["env", f"PYTHONPATH={a.root}/site-packages", "qemu-aarch64-static", "-cpu", a.cpu,
               "-L", root, f"{root}/usr/bin/python3.11"]
    rows = []
    for pte in a.ptes:
        name = os.path.splitext(os.path.basename(pte))[0]
        inp, out_h, out_a = (f"{a.work}/{name}_{s}.npz" for s in ("in", "host", "arm64"))
        make_inputs(pte, inp)
        row = {"pte": name}
        try:
            host = run([sys.executable, RUN, pte, inp, out_h, "--runs", str(a.runs)])
            arm = run([*env_arm, RUN, pte, inp, out_a, "--runs", str(a.runs), "--api", a.api])
            h, r = np.load(out_h), np.load(out_a)
            row.update(sqnr_db=round(sqnr([h[k] for k in sorted(h.files)], [r[k] for k in sorted(h.files)]), 1),
                       host=host, arm64=arm)
        except Exception as e:  # report and go on with the next program
            row["error"] = str(e)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(f"\n{'program':34} {'SQNR dB':>8} {'start s':>8} {'load s':>7} {'1st s':>7} {'run s':>7} {'host run s':>10} xnnpack")
    for row in rows:
        if "error" in row:
            print(f"{row['pte']:34} ERROR {row['error']}")
            continue
        h, r = row["host"], row["arm64"]
        print(f"{row['pte']:34} {row['sqnr_db']:>8} {r['import_s']:>8} {r['load_s']:>7} {r['first_run_s']:>7} "
              f"{r['steady_run_s']:>7} {h['steady_run_s']:>10} {r['xnnpack_registered']}")


if __name__ == "__main__":
    main()
