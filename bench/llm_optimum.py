"""pteforge against optimum-executorch on the same Gemma 3 checkpoint, side by side in one run.

    uv run python bench/llm_optimum.py [--config 270m|tiny] [--max-seq-len 128] [--work DIR]
                                       [--reuse] [--rounds 3] [--decode 32]

optimum-executorch 1.1.0 (the newest on the registry) pins transformers==5.0.0rc1, which
conflicts with pteforge's transformers, so it cannot share our environment. It installs
cleanly on its own (with executorch 1.5.1, our runtime's version), so the bench builds it
a virtual environment of its own with uv and runs optimum-cli there.

1. One checkpoint for both: the config (Gemma 3 270M's real one, or a 2-layer one of the
   same architecture) with seeded random weights, saved with ``save_pretrained``.
2. ``pteforge export --llm DIR`` at xnnpack (fp32) and xnnpack:8da4w (int4 groups of 32,
   int8 embedding), and ``optimum-cli export executorch`` with its xnnpack recipe, custom
   SDPA and KV cache, at fp32 and ``--qlinear 8da4w --qlinear_group_size 32 --qembedding 8w``.
3. Every program in one child process of this environment's ExecuTorch runtime, taking
   turns over three rounds (``--rounds``): load, prefill an 8-token prompt, greedy-decode 32
   tokens. The figure is the median of the rounds, the ratio the median of each round's
   ratio (the two ran back to back); the tokens each program decodes are compared.

Goals (issue #17): decode tokens/s of pteforge / optimum >= 1.0 and size pteforge / optimum
<= 1.0, per precision.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPTIMUM = "optimum-executorch==1.1.0"
PROMPT = [2, 818, 5279, 529, 7001, 563, 496, 3678]  # bos + 7 ids, the same for every program
DECODE = 32
ROUNDS = 3


def work_checkpoint(work: str | Path | None, config: str, prefix: str) -> tuple[Path, Path]:
    """The bench's folder (``work``, or a new temporary one) and the seeded checkpoint in it,
    made once."""
    work = Path(work or tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / f"gemma3-{config}"
    if not (ckpt / "config.json").is_file():
        checkpoint(ckpt, config)
    return work, ckpt


def checkpoint(directory: Path, config: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from pteforge.families import family

    entry = dict(family("gemma").checkpoints["gemma-3-270m"]["config"])
    if config == "tiny":
        entry.update(num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=2,
                     head_dim=64, query_pre_attn_scalar=64)
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(entry.pop("model_type"), **entry)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(directory)


def optimum_env(root: Path) -> Path:
    """optimum-executorch's own virtual environment (made once, kept in ``root``)."""
    python = root / "bin" / "python"
    if not (python.exists() and subprocess.run([str(python), "-c", "import optimum.exporters.executorch"],
                                               capture_output=True).returncode == 0):
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
        subprocess.run(["uv", "venv", "-q", "--allow-existing", "-p", sys.executable, str(root)], check=True, env=env)
        subprocess.run(["uv", "pip", "install", "-q", "-p", str(python), OPTIMUM], check=True, env=env)
    return python


def timed_run(cmd: list[str], log: Path, ok=(0,)) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if code not in ok:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {code}); see {log}")
    return time.perf_counter() - t0


CHILD = r"""
import json, statistics, sys, time
import torch
from executorch.runtime import Verification
import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  llama::custom_sdpa, update_cache (optimum)
from pteforge.runtime.host import load_runtime
programs, prompt, decode, rounds = json.loads(sys.argv[1])
runtime = load_runtime()  # with the quantized_decomposed:: kernels
results = {name: {"decode": [], "prefill": [], "load": []} for name in programs}
for _ in range(rounds):
    for name, path in programs.items():
        t0 = time.perf_counter()
        method = runtime.load_program(path, verification=Verification.Minimal).load_method("forward")
        results[name]["load"].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        logits = method.execute([torch.tensor([prompt]), torch.arange(len(prompt))])[0]
        results[name]["prefill"].append(len(prompt) / (time.perf_counter() - t0))
        tokens, pos, t0 = [int(logits[0, -1].argmax())], len(prompt), time.perf_counter()
        for _ in range(decode - 1):
            logits = method.execute([torch.tensor([[tokens[-1]]]), torch.tensor([pos])])[0]
            tokens.append(int(logits[0, -1].argmax()))
            pos += 1
        results[name]["decode"].append((decode - 1) / (time.perf_counter() - t0))
        results[name]["tokens"] = tokens
        del method
print(json.dumps(results))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=["270m", "tiny"], default="270m")
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--work", default=None, help="keep checkpoints, programs and logs here")
    ap.add_argument("--venv", default=str(Path(tempfile.gettempdir()) / "pteforge-optimum-venv"))
    ap.add_argument("--reuse", action="store_true", help="keep the programs already in --work (no new exports)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of taking turns (the figure: their median)")
    ap.add_argument("--decode", type=int, default=DECODE, help="greedy steps per round")
    args = ap.parse_args()
    work, ckpt = work_checkpoint(args.work, args.config, "pteforge-llm-optimum-")
    python = optimum_env(Path(args.venv))
    n = str(args.max_seq_len)
    seconds, programs = {}, {}
    ours = work / "pteforge"
    if not (args.reuse and (ours / "index.json").is_file()):
        shutil.rmtree(ours, ignore_errors=True)
        # exit 1: a target did not pass its proof (8da4w on random weights); its program is still timed
        seconds["pteforge"] = timed_run([sys.executable, "-m", "pteforge", "export", "--llm", str(ckpt), "--weights",
                                         "pretrained", "--max-seq-len", n, "--backends", "xnnpack", "xnnpack:8da4w",
                                         "--no-cache", "--out", str(ours)], work / "pteforge.log", ok=(0, 1))
    for e in json.loads((ours / "index.json").read_text())["models"] + \
            json.loads((ours / "index.json").read_text()).get("failed", []):
        programs[f"pteforge {e['precision']}"] = str(ours / e["file"])
    cli = str(Path(python).parent / "optimum-cli")
    for precision, extra in (("fp32", []), ("8da4w", ["--qlinear", "8da4w", "--qlinear_group_size", "32",
                                                      "--qembedding", "8w"])):
        dest = work / f"optimum-{precision}"
        if args.reuse and any(dest.glob("*.pte")):
            programs[f"optimum {precision}"] = str(next(dest.glob("*.pte")))
            continue
        shutil.rmtree(dest, ignore_errors=True)
        seconds[f"optimum {precision}"] = timed_run(
            [cli, "export", "executorch", "--model", str(ckpt), "--task", "text-generation", "--recipe", "xnnpack",
             "--use_custom_sdpa", "--use_custom_kv_cache", "--max_seq_len", n, "--output_dir", str(dest), *extra],
            work / f"optimum-{precision}.log")
        programs[f"optimum {precision}"] = str(next(dest.glob("*.pte")))
    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps([programs, PROMPT, args.decode, args.rounds])],
                           capture_output=True, text=True)
    if child.returncode != 0:
        print(child.stderr[-3000:])
        return 1
    rounds = json.loads(child.stdout.strip().splitlines()[-1])
    measured = {n: {"tokens": r["tokens"], **{k: statistics.median(r[k]) for k in ("decode", "prefill", "load")}}
                for n, r in rounds.items()}
    print(f"Gemma 3 ({args.config} config, seeded random weights), --max-seq-len {n}; export wall times: "
          + (", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()) or "(programs reused)"))
    print(f"each program: load, prefill {len(PROMPT)} tokens, greedy-decode {args.decode}; median of {args.rounds} rounds, "
          "taking turns, one child process\n")
    print("| program | size MB | load ms | prefill tok/s | decode tok/s | tokens = optimum's |")
    print("|---|---|---|---|---|---|")
    for name, path in programs.items():
        m = measured[name]
        other = measured.get(name.replace("pteforge", "optimum"))
        same = sum(a == b for a, b in zip(m["tokens"], other["tokens"])) if other else None
        print(f"| {name} | {os.path.getsize(path) / 2**20:.1f} | {m['load']:.0f} | {m['prefill']:.0f} | "
              f"{m['decode']:.1f} | {f'{same}/{args.decode}' if same is not None else '—'} |")
    print()
    for precision in ("fp32", "8da4w"):
        a, b = programs.get(f"pteforge {precision}"), programs.get(f"optimum {precision}")
        if a and b:
            # each round's pair ran back to back: the ratio per round, then its median and range
            ratios = sorted(x / y for x, y in zip(rounds[f"pteforge {precision}"]["decode"],
                                                  rounds[f"optimum {precision}"]["decode"]))
            size = os.path.getsize(a) / os.path.getsize(b)
            print(f"{precision}: decode tok/s pteforge/optimum {statistics.median(ratios):.3f} (goal >= 1.0; "
                  f"per round {ratios[0]:.3f}-{ratios[-1]:.3f}), size pteforge/optimum {size:.4f} (goal <= 1.0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
