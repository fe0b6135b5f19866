"""Gemma 3 270M (its real configuration, seeded random weights) through `pteforge export --gemma`,
every XNNPACK precision, one run: size, delegation, the proof and the speed per program.

    uv run python bench/llm.py [--out DIR] [--max-seq-len 128]

The comparison with optimum-executorch (the same checkpoint, side by side) is
`bench/llm_optimum.py`: optimum-executorch 1.1.0 pins transformers==5.0.0rc1, which
conflicts with pteforge's, so that bench installs it in an environment of its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--max-seq-len", type=int, default=128)
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="pteforge-llm-bench-"))
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "pteforge", "export", "--gemma", "--weights", "none",
                          "--max-seq-len", str(args.max_seq_len), "--backends", "xnnpack", "xnnpack:8da4w",
                          "xnnpack:8da8w", "coreml", "--out", str(out)], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if not (out / "index.json").is_file():
        print(run.stdout[-3000:], run.stderr[-3000:])
        return 1
    entries = json.loads((out / "index.json").read_text())["models"]
    print(f"gemma-3-270m (real configuration, --weights none), --max-seq-len {args.max_seq_len}: "
          f"export of {len(entries)} programs took {seconds:.0f} s\n")
    print("| target | status | size MB | delegated | greedy tokens = eager | min logits SQNR | perplexity change "
          "| prefill tok/s | decode tok/s | load ms | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for e in entries:
        g = e.get("generation") or {}
        ppl = (g.get("perplexity") or {}).get("changePercent")
        cells = [e["target"], e["status"], f"{e['sizeMB']:.1f}", f"{e['delegation']['percent']:.0f} %",
                 f"{g['tokenAgreement']:.0%} of {g['steps']}" if g else "—",
                 f"{g['minSqnrDb']:.1f} dB" if g else "—", f"{ppl:+.2f} %" if ppl is not None else "—",
                 f"{g['prefillTokensPerSecond']:.0f}" if g else "—",
                 f"{g['decodeTokensPerSecond']:.1f}" if g else "—",
                 f"{g['loadMs']:.0f}" if g else "—", f"{g['peakRssMb']:.0f}" if g else "—"]
        print("| " + " | ".join(cells) + " |")
    fp32 = next((e for e in entries if e["target"] == "xnnpack"), None)
    for e in entries:
        if fp32 and e is not fp32 and e["target"].startswith("xnnpack") and e.get("generation") and fp32.get("generation"):
            print(f"{e['target']} / xnnpack fp32: size {e['size'] / fp32['size']:.2f}×, decode tok/s "
                  f"{e['generation']['decodeTokensPerSecond'] / fp32['generation']['decodeTokensPerSecond']:.2f}×")
    print("\nagainst optimum-executorch: uv run python bench/llm_optimum.py")
    return 0 if run.returncode == 0 else run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
