"""Text generation on this CPU: pteforge's programs against llama.cpp and transformers' own
ExecuTorch exporter, on one checkpoint, side by side in one run, beside the machine's memory
bandwidth (the limit of decoding: each token reads every weight once).

    uv run --group bench python bench/llm.py [--config 270m|tiny] [--work DIR] [--reuse]
                                             [--rounds 5] [--prompt 128] [--decode 64] [--threads 2]
                                             [--huge-pages]

1. One checkpoint: Gemma 3 270M's real config (or a 2-layer one, ``--config tiny``) with
   seeded random weights, and a byte-level BPE tokenizer trained here on pteforge's text
   (llama.cpp's converter needs one; the programs are fed token ids, the same for all).
2. Its programs, each timed as its maker builds it:
   - ``pteforge export --llm`` at XNNPACK fp32, 8da4w and 8da8w;
   - transformers' ``ExecutorchExporter`` (``bench/llm_tfx.py``) at fp32, and 8da8w (PT2E
     with XNNPACK's quantizer: the closest it offers);
   - llama.cpp (llama-cpp-python, built from source by ``uv sync --group bench``) on GGUF
     files from llama.cpp's own converter: F32, Q8_0, Q4_0 (its default: the output matrix
     at Q8_0) and Q4_0 pure (every matrix 4-bit: the bytes 8da4w reads).
3. Each program runs in a fresh process, taking turns over ``--rounds`` rounds, on
   ``--threads`` threads: load, prefill a ``--prompt``-token prompt (time to first token),
   greedy-decode ``--decode`` tokens (NumPy's argmax over the last position's logits, read
   where the runtime wrote them, for every runtime); its peak RSS from after the imports.
   The figure is the median of the rounds; a ratio is the median of each round's ratio.
   ``--huge-pages`` gives every runtime, and the bandwidth probe, glibc's malloc on
   transparent huge pages.
4. Greedy tokens are compared with Hugging Face eager's on the first 32; the weights read
   per decoded token (the file less the embedding table, of which one row is read) over the
   decode time, against the bandwidth measured here (a 1 GiB read on the same threads).
5. Where pteforge misses a goal, an ETDump profile of its decode says which kernels take
   the time.

Writes ``bench/llm.json`` (``--json``) with the CPU named.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from llm_optimum import timed_run, work_checkpoint  # noqa: E402

AGREE = 32  # greedy tokens compared with eager's
PTEFORGE = {"xnnpack": "fp32", "xnnpack:8da4w": "8da4w", "xnnpack:8da8w": "8da8w"}
GGUF = {"F32": None, "Q8_0": 7, "Q4_0": 2, "Q4_0 pure": 2}  # llama_ftype: LLAMA_FTYPE_MOSTLY_Q8_0 = 7, _Q4_0 = 2


# -- the checkpoint -------------------------------------------------------------------------
def tokenizer(ckpt: Path, vocab_size: int) -> None:
    """A byte-level BPE (GPT-2's pre-tokenizer) with Gemma's special ids (<pad> 0, <eos> 1,
    <bos> 2), filled with unused tokens to the model's vocabulary size: llama.cpp's converter
    cuts the embedding to the tokenizer's vocabulary, and a smaller one would make its
    output matrix smaller than the model's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from pteforge.text.llm import PERPLEXITY_TEXT

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=["<pad>", "<eos>", "<bos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([PERPLEXITY_TEXT.read_text()] * 4, trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    vocab.update({f"<unused{i}>": i for i in range(len(vocab), vocab_size)})
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), bos_token="<bos>", eos_token="<eos>",
                            pad_token="<pad>", add_bos_token=True).save_pretrained(ckpt)


def prompt_ids(ckpt: Path, n: int) -> list[int]:
    """<bos> and the text's first n-1 tokens (repeated if short)."""
    from transformers import AutoTokenizer

    from pteforge.text.llm import PERPLEXITY_TEXT

    ids = AutoTokenizer.from_pretrained(ckpt)(PERPLEXITY_TEXT.read_text(), add_special_tokens=False)["input_ids"]
    return [2] + (ids * (1 + n // max(len(ids), 1)))[: n - 1]


def eager_tokens(ckpt: Path, prompt: list[int], n: int) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


# -- the programs ---------------------------------------------------------------------------
def pteforge_programs(ckpt: Path, work: Path, max_seq_len: int, reuse: bool) -> tuple[dict, dict]:
    """{name: .pte}, {name: {export seconds, status}} from one ``pteforge export --llm`` run."""
    out = work / "pteforge"
    wall = None
    if not (reuse and (out / "index.json").is_file()):
        # exit 1: a target missed its proof (a quantized one, on random weights); its program is still timed
        wall = timed_run([sys.executable, "-m", "pteforge", "export", "--llm", str(ckpt), "--weights", "pretrained",
                    "--max-seq-len", str(max_seq_len), "--backends", *PTEFORGE, "--no-cache", "--out", str(out)],
                   work / "pteforge.log", ok=(0, 1))
    man = json.loads((out / "index.json").read_text())
    programs, facts = {}, {}
    for e in man["models"] + man.get("failed", []):
        name = f"pteforge {PTEFORGE[e['target']]}"
        programs[name] = str(out / e["file"])
        lowering = sum(v for k, v in e.get("timings", {}).items() if k in ("load", "lower", "serialize"))
        facts[name] = {"status": e["status"], "exportSeconds": lowering, "timings": e.get("timings", {})}
    if wall is not None:
        facts["pteforge run"] = {"exportSeconds": wall}  # the whole run: build, captures, every target, proofs
    return programs, facts


def transformers_programs(ckpt: Path, work: Path, max_seq_len: int, reuse: bool) -> tuple[dict, dict]:
    programs, facts = {}, {}
    for precision in ("fp32", "8da8w"):
        out = work / f"transformers-{precision}"
        name = f"transformers {precision}"
        if not (reuse and (out / "bench.json").is_file()):
            try:
                timed_run([sys.executable, str(HERE / "llm_tfx.py"), "export", str(ckpt), str(out), "--precision",
                            precision, "--max-seq-len", str(max_seq_len)], work / f"{name.replace(' ', '-')}.log")
            except SystemExit as exc:
                facts[name] = {"status": "EXPORT_FAILED", "error": str(exc)}
                continue
        programs[name] = str(out)
        facts[name] = {"status": "exported", **json.loads((out / "bench.json").read_text())}
    return programs, facts


def llama_cpp_source(cache: Path) -> Path:
    """llama.cpp's tree from the llama-cpp-python sdist of the installed version (its
    converter and gguf-py), downloaded once."""
    version = metadata.version("llama-cpp-python")
    root = cache / f"llama_cpp_python-{version}"
    if not (root / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={version}", "-d", str(cache)], check=True)
        import tarfile

        with tarfile.open(cache / f"llama_cpp_python-{version}.tar.gz") as tar:
            tar.extractall(cache, filter="data")
    return root / "vendor" / "llama.cpp"


CONVERT = r"""
import runpy, sys
root = sys.argv.pop(1)
sys.path[:0] = [root, root + "/gguf-py"]
import conversion.base
# The converter names a BPE tokenizer's pre-tokenizer by hashing what it makes of a test
# string, from a list of known models; this checkpoint's is GPT-2's byte-level one.
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
runpy.run_path(root + "/convert_hf_to_gguf.py", run_name="__main__")
"""


def gguf_programs(ckpt: Path, work: Path, reuse: bool) -> tuple[dict, dict]:
    import llama_cpp

    source = llama_cpp_source(Path(tempfile.gettempdir()) / "pteforge-llama-cpp")
    sys.path.insert(0, str(source / "gguf-py"))  # gguf_bytes_per_token reads the files with the converter's reader
    f32 = work / "model-F32.gguf"
    facts: dict = {}
    if not (reuse and f32.is_file()):
        seconds = timed_run([sys.executable, "-c", CONVERT, str(source), str(ckpt), "--outtype", "f32",
                              "--outfile", str(f32)], work / "gguf-convert.log")
        facts["llama.cpp F32"] = {"exportSeconds": seconds}
    programs = {"llama.cpp F32": str(f32)}
    for kind, ftype in GGUF.items():
        if ftype is None:
            continue
        path = work / f"model-{kind.replace(' ', '-')}.gguf"
        if not (reuse and path.is_file()):
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype, params.nthread, params.pure = ftype, os.cpu_count() or 1, kind.endswith("pure")
            t0 = time.perf_counter()
            if llama_cpp.llama_model_quantize(str(f32).encode(), str(path).encode(), params) != 0:
                raise SystemExit(f"llama.cpp could not quantize {f32} to {kind}")
            facts[f"llama.cpp {kind}"] = {"exportSeconds": time.perf_counter() - t0}
        programs[f"llama.cpp {kind}"] = str(path)
    return programs, facts


# -- bytes per token --------------------------------------------------------------------------
def gguf_bytes_per_token(path: str) -> int:
    """Every tensor's bytes, less the token embedding where the output matrix is its own
    (tied, it is the output matrix and read whole)."""
    from gguf import GGUFReader

    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    total = sum(tensors.values())
    return total - tensors["token_embd.weight"] if "output.weight" in tensors else total


def pte_bytes_per_token(path: str, config: dict, embedding_bytes: int) -> int:
    """The program's file (transformers' decode program, of its two) less its embedding table
    (``embedding_bytes`` an entry: 4 fp32, 1 int8 plus a per-row fp32 scale)."""
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    table = vocab * hidden * embedding_bytes + (vocab * 4 if embedding_bytes == 1 else 0)
    return os.path.getsize(Path(path) / "decode.pte" if Path(path).is_dir() else path) - table


def file_mb(path: str) -> float:
    """The program's size: both of transformers' programs, each with its own weights."""
    p = Path(path)
    return (sum(f.stat().st_size for f in p.glob("*.pte")) if p.is_dir() else p.stat().st_size) / 1e6


# -- the runs -----------------------------------------------------------------------------------
CHILD_PTE = r"""
import json, sys, time
import torch
from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
from pteforge.core import system
from pteforge.runtime.host import execute_in_place, load_forward, load_runtime
path, prompt, decode, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
_unsafe_reset_threadpool(threads)
load_runtime()
reset = system.reset_peak_rss()
t0 = time.perf_counter()
program, method = load_forward(path)
load_ms = (time.perf_counter() - t0) * 1000
t0 = time.perf_counter()
# the logits read where the program wrote them, as llama.cpp's are; NumPy's argmax for both
logits = execute_in_place(method, [torch.tensor([prompt]), torch.arange(len(prompt))])[0]
tokens = [int(logits[0, -1].numpy().argmax())]
ttft = time.perf_counter() - t0
t1 = time.perf_counter()
for i in range(decode - 1):
    logits = execute_in_place(method, [torch.tensor([[tokens[-1]]]), torch.tensor([len(prompt) + i])])[0]
    tokens.append(int(logits[0, -1].numpy().argmax()))
decode_s = time.perf_counter() - t1
print(json.dumps({"loadMs": load_ms, "ttftMs": ttft * 1000, "prefillTokensPerSecond": len(prompt) / ttft,
                  "decodeTokensPerSecond": (decode - 1) / decode_s, "tokens": tokens,
                  "peakRssMb": system.peak_rss_mb(reset)}))
"""

CHILD_GGUF = r"""
import json, sys, time
import numpy as np
import llama_cpp
from pteforge.core import system
path, prompt, decode, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
reset = system.reset_peak_rss()
t0 = time.perf_counter()
llm = llama_cpp.Llama(path, n_ctx=len(prompt) + decode, n_batch=len(prompt), n_ubatch=len(prompt), n_threads=threads,
                      n_threads_batch=threads, verbose=False)
load_ms = (time.perf_counter() - t0) * 1000
vocab = llm.n_vocab()

def last():
    return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(vocab,))))

t0 = time.perf_counter()
llm.eval(prompt)
tokens = [last()]
ttft = time.perf_counter() - t0
t1 = time.perf_counter()
for _ in range(decode - 1):
    llm.eval([tokens[-1]])
    tokens.append(last())
decode_s = time.perf_counter() - t1
print(json.dumps({"loadMs": load_ms, "ttftMs": ttft * 1000, "prefillTokensPerSecond": len(prompt) / ttft,
                  "decodeTokensPerSecond": (decode - 1) / decode_s, "tokens": tokens,
                  "peakRssMb": system.peak_rss_mb(reset)}))
"""


HUGE_PAGES = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}  # malloc asks for transparent huge pages (madvise)


def child_env(threads: int, huge_pages: bool) -> dict:
    """The environment of every timed process, the same for every runtime."""
    return {**os.environ, "PYTHONPATH": str(HERE.parent), "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": str(threads),
            **(HUGE_PAGES if huge_pages else {})}


def time_once(name: str, path: str, prompt: list[int], decode: int, threads: int, huge_pages: bool = False) -> dict:
    if name.startswith("llama.cpp"):
        cmd = [sys.executable, "-c", CHILD_GGUF]
    elif name.startswith("transformers"):
        cmd = [sys.executable, str(HERE / "llm_tfx.py"), "run"]
    else:
        cmd = [sys.executable, "-c", CHILD_PTE]
    proc = subprocess.run([*cmd, path, json.dumps(prompt), str(decode), str(threads)], capture_output=True,
                          text=True, env=child_env(threads, huge_pages))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode < 0:  # its last line of stderr is what it logged before, not why it died
        from pteforge.runtime.isolate import describe_exit

        why = " (an instruction this CPU lacks: build it for this CPU, docs/text-generation.md)" \
            if proc.returncode == -signal.SIGILL else ""
        return {"error": f"{name}: {describe_exit(proc.returncode)}{why}"}
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"error": f"{name}: {tail[:300]}"}
    return json.loads(lines[-1])


def bandwidth(threads: int) -> dict:
    """GB/s of reading a 1 GiB array on ``threads`` threads, the best of three ways (each the
    median of 5 passes): torch's sum, NumPy's sum with the array split over Python threads
    (NumPy lets go of the GIL), and torch's copy (read and write counted); a runtime that
    reads faster than the first two shows the measure is low, not the runtime."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import torch

    torch.set_num_threads(threads)
    x = torch.ones(2**28)  # 1 GiB of fp32
    y = torch.empty_like(x)
    parts = np.array_split(x.numpy(), threads)

    def passes(fn) -> float:
        seconds = []
        for _ in range(6):
            t0 = time.perf_counter()
            fn()
            seconds.append(time.perf_counter() - t0)
        return statistics.median(seconds[1:])

    gib = x.numel() * 4
    with ThreadPoolExecutor(threads) as pool:
        ways = {"torch sum": gib / passes(lambda: float(x.sum())),
                "numpy sum": gib / passes(lambda: list(pool.map(np.sum, parts))),
                "torch copy": 2 * gib / passes(lambda: y.copy_(x))}
    ways = {k: v / 1e9 for k, v in ways.items()}
    return {"readGBs": max(ways["torch sum"], ways["numpy sum"]), "ways": ways}


def huge_pages_possible() -> bool:
    """Whether ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` gives a process transparent huge pages:
    Linux with THP on ``always`` or ``madvise``, and glibc 2.35 or later."""
    import platform

    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    libc, version = platform.libc_ver()
    return "[never]" not in mode and libc == "glibc" and tuple(int(x) for x in version.split(".")[:2]) >= (2, 35)


# -- the profile ----------------------------------------------------------------------------------
def decode_profile(path: str, prompt: list[int], steps: int, threads: int, huge_pages: bool = False,
                   top: int = 8) -> list[tuple[str, float]]:
    """ms per decoded token by kernel (XNNPACK's operators inside its delegate), from ETDump."""
    code = r"""
import json, re, sys, tempfile
from collections import defaultdict
from pathlib import Path
import torch
from executorch.devtools import Inspector
from executorch.extension.pybindings.portable_lib import _load_for_executorch, _unsafe_reset_threadpool
from pteforge.runtime.host import load_runtime
path, prompt, steps, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
_unsafe_reset_threadpool(threads)
load_runtime()  # the llama:: and quantized_decomposed:: kernels
module = _load_for_executorch(path, enable_etdump=True)
logits = module.forward([torch.tensor([prompt]), torch.arange(len(prompt))])[0]
token = int(logits[0, -1].argmax())
for i in range(steps):
    token = int(module.forward([torch.tensor([[token]]), torch.tensor([len(prompt) + i])])[0][0, -1].argmax())
with tempfile.TemporaryDirectory() as tmp:
    dump = Path(tmp) / "p.etdp"
    module.write_etdump_result_to_file(str(dump))
    inspector = Inspector(etdump_path=str(dump))
by = defaultdict(float)
for block in inspector.event_blocks:
    for event in block.events:
        raw = (event.perf_data.raw if event.perf_data else [])[1:]  # the prompt's call is not a decode step
        if raw and event.name not in ("Method::execute", "DELEGATE_CALL"):
            by[re.sub(r" #\d+$", "", event.name)] += sum(raw) / steps
print(json.dumps(sorted(by.items(), key=lambda kv: -kv[1])))
"""
    proc = subprocess.run([sys.executable, "-c", code, path, json.dumps(prompt), str(steps), str(threads)],
                          capture_output=True, text=True, env=child_env(threads, huge_pages))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]
    return json.loads(lines[-1])[:top] if lines else [("profile failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:200], 0.0)]


# -- main ---------------------------------------------------------------------------------------
def ratio(rounds: dict, a: str, b: str, key: str) -> float | None:
    pairs = [x[key] / y[key] for x, y in zip(rounds.get(a, []), rounds.get(b, [])) if key in x and key in y]
    return statistics.median(pairs) if pairs else None


def main() -> int:  # noqa: C901 -- one bench, read top to bottom
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=["270m", "tiny"], default="270m")
    ap.add_argument("--work", default=None, help="keep checkpoint, programs and logs here")
    ap.add_argument("--reuse", action="store_true", help="time the programs already in --work (no new exports)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens (prefill)")
    ap.add_argument("--decode", type=int, default=64, help="greedy decode steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", nargs="*", default=[], choices=["transformers", "llama.cpp"])
    ap.add_argument("--huge-pages", action="store_true",
                    help="every runtime and the bandwidth probe with glibc's malloc on transparent huge pages (Linux)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here (bench/llm.json)")
    ap.add_argument("--bandwidth-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bandwidth_only:
        print(json.dumps(bandwidth(args.threads)))
        return 0
    from pteforge.core import system

    if args.huge_pages and not huge_pages_possible():
        print("--huge-pages: this system gives no transparent huge pages through madvise "
              "(/sys/kernel/mm/transparent_hugepage/enabled, glibc >= 2.35); run without it", file=sys.stderr)
        return 2

    work, ckpt = work_checkpoint(args.work, args.config, "pteforge-llm-bench-")
    config = json.loads((ckpt / "config.json").read_text())
    if not (ckpt / "tokenizer.json").is_file():
        tokenizer(ckpt, config["vocab_size"])
    max_seq_len = args.prompt + args.decode
    prompt = prompt_ids(ckpt, args.prompt)
    eager = eager_tokens(ckpt, prompt, AGREE)
    print(f"CPU: {system.cpu_name()}, {os.cpu_count()} cores; {args.threads} threads for every runtime"
          f"{', on huge pages' if args.huge_pages else ''}; checkpoint {ckpt}", flush=True)

    programs, facts = pteforge_programs(ckpt, work, max_seq_len, args.reuse)
    if "transformers" not in args.skip:
        p, f = transformers_programs(ckpt, work, max_seq_len, args.reuse)
        programs.update(p), facts.update(f)
    if "llama.cpp" not in args.skip:
        p, f = gguf_programs(ckpt, work, args.reuse)
        programs.update(p)
        for k, v in f.items():
            facts.setdefault(k, {}).update(v)
    kept = work / "exports.json"  # what the exports measured, for a later --reuse run that times only
    if args.reuse and kept.is_file():
        for k, v in json.loads(kept.read_text()).items():
            facts.setdefault(k, {}).update({**v, **facts.get(k, {})})
    kept.write_text(json.dumps(facts, indent=2))
    rounds: dict[str, list[dict]] = {name: [] for name in programs}
    measured = []  # the bandwidth, in a fresh process at the start of each round
    for r in range(args.rounds):
        measured.append(json.loads(subprocess.run([sys.executable, __file__, "--bandwidth-only", "--threads",
                                                   str(args.threads)], capture_output=True, text=True,
                                                  env=child_env(args.threads, args.huge_pages),
                                                  check=True).stdout.strip().splitlines()[-1]))
        for name, path in programs.items():
            rounds[name].append(time_once(name, path, prompt, args.decode, args.threads, args.huge_pages))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    bw = {"readGBs": statistics.median(m["readGBs"] for m in measured),
          "ways": {k: statistics.median(m["ways"][k] for m in measured) for k in measured[0]["ways"]}}
    print(f"memory bandwidth, {args.threads} threads, median of the rounds: {bw['readGBs']:.1f} GB/s read ("
          + ", ".join(f"{k} {v:.1f}" for k, v in bw["ways"].items()) + ")", flush=True)

    embedding = {"pteforge fp32": 4, "pteforge 8da4w": 1, "pteforge 8da8w": 1, "transformers fp32": 4,
                 "transformers 8da8w": 4}
    rows = {}
    for name, path in programs.items():
        good = [x for x in rounds[name] if "error" not in x]
        row = {"file": path, "sizeMB": round(file_mb(path), 1), **facts.get(name, {})}
        if not good:
            row["error"] = rounds[name][0].get("error")
            rows[name] = row
            continue
        med = {k: statistics.median(x[k] for x in good) for k in
               ("loadMs", "ttftMs", "prefillTokensPerSecond", "decodeTokensPerSecond")}
        rss = [x["peakRssMb"] for x in good if x.get("peakRssMb") is not None]
        per_token = gguf_bytes_per_token(path) if path.endswith(".gguf") else pte_bytes_per_token(path, config, embedding[name])
        achieved = per_token * med["decodeTokensPerSecond"] / 1e9
        tokens = good[0]["tokens"][:AGREE]
        row.update(med, peakRssMb=max(rss) if rss else None, mbPerToken=round(per_token / 1e6, 1),
                   decodeGBs=round(achieved, 2), bandwidthFraction=round(achieved / bw["readGBs"], 3),
                   eagerAgreement=sum(a == b for a, b in zip(tokens, eager)) / AGREE,
                   firstDifference=next((i for i, (a, b) in enumerate(zip(tokens, eager)) if a != b), None))
        rows[name] = row

    print(f"\nGemma 3 ({args.config} config, seeded random weights); prompt {args.prompt} tokens, greedy decode "
          f"{args.decode}; median of {args.rounds} rounds, taking turns, a fresh process each\n")
    print("| program | file MB | MB read per token | load ms | time to first token ms | prefill tok/s | decode tok/s "
          "| decode GB/s (of bandwidth) | peak RSS MB | greedy = eager (32) | export s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        if "error" in row or "decodeTokensPerSecond" not in row:
            print(f"| {name} | {row.get('sizeMB', '—')} | failed: {row.get('error', row.get('status'))} |")
            continue
        agree = f"{row['eagerAgreement']:.0%}" + (f" (first differs at {row['firstDifference']})"
                                                   if row["firstDifference"] is not None else "")
        export_s = f"{row['exportSeconds']:.0f}" if row.get("exportSeconds") is not None else "—"
        print(f"| {name} | {row['sizeMB']:.0f} | {row['mbPerToken']:.0f} | {row['loadMs']:.0f} | {row['ttftMs']:.0f} | "
              f"{row['prefillTokensPerSecond']:.0f} | {row['decodeTokensPerSecond']:.1f} | {row['decodeGBs']:.1f} "
              f"({row['bandwidthFraction']:.0%}) | {row['peakRssMb'] or 0:.0f} | {agree} | {export_s} |")

    walls = {k: v["exportSeconds"] for k, v in facts.items() if k not in rows and "exportSeconds" in v}
    if walls:
        print("\nexport wall times: " + ", ".join(f"{k} {v:.0f} s" for k, v in walls.items()))
    goals = [
        ("pteforge 8da4w decode / llama.cpp Q4_0 pure (same bytes)", "pteforge 8da4w", "llama.cpp Q4_0 pure", "decodeTokensPerSecond"),
        ("pteforge 8da4w decode / llama.cpp Q4_0", "pteforge 8da4w", "llama.cpp Q4_0", "decodeTokensPerSecond"),
        ("pteforge 8da8w decode / llama.cpp Q8_0", "pteforge 8da8w", "llama.cpp Q8_0", "decodeTokensPerSecond"),
        ("pteforge fp32 decode / llama.cpp F32", "pteforge fp32", "llama.cpp F32", "decodeTokensPerSecond"),
        ("pteforge fp32 decode / transformers fp32", "pteforge fp32", "transformers fp32", "decodeTokensPerSecond"),
        ("pteforge 8da8w decode / transformers 8da8w", "pteforge 8da8w", "transformers 8da8w", "decodeTokensPerSecond"),
        ("pteforge fp32 prefill / llama.cpp F32", "pteforge fp32", "llama.cpp F32", "prefillTokensPerSecond"),
        ("pteforge 8da4w prefill / llama.cpp Q4_0 pure", "pteforge 8da4w", "llama.cpp Q4_0 pure", "prefillTokensPerSecond"),
        ("pteforge 8da8w prefill / llama.cpp Q8_0", "pteforge 8da8w", "llama.cpp Q8_0", "prefillTokensPerSecond"),
    ]
    results = {}
    print("\ngoals (each ≥ 1.0; the median of each round's ratio):")
    for label, a, b, key in goals:
        value = ratio(rounds, a, b, key)
        results[label] = value
        print(f"  {label}: {'—' if value is None else f'{value:.2f}'}{'' if value is None or value >= 1.0 else '  MISSED'}")
    fp32 = rows.get("pteforge fp32", {}).get("bandwidthFraction")
    results["pteforge fp32 decode / measured bandwidth (goal ≥ 0.80)"] = fp32
    print(f"  pteforge fp32 decode reads {'—' if fp32 is None else f'{fp32:.0%}'} of the measured bandwidth (goal ≥ 80 %)")

    profiles = {}
    missed = {a for label, a, b, key in goals if results[label] is not None and results[label] < 1.0}
    if fp32 is not None and fp32 < 0.8:
        missed.add("pteforge fp32")
    for name in sorted(missed):
        profiles[name] = decode_profile(programs[name], prompt, 16, args.threads, args.huge_pages)
        print(f"\n{name}: ms per decoded token by kernel (ETDump, 16 steps)")
        for op, ms in profiles[name]:
            print(f"  {ms:8.2f}  {op}")
    if args.json:
        args.json.write_text(json.dumps({
            "cpu": system.cpu_name(), "cores": os.cpu_count(), "threads": args.threads, "hugePages": args.huge_pages,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "config": args.config,
            "prompt": args.prompt, "decode": args.decode, "rounds": args.rounds, "bandwidth": bw,
            "versions": {p: metadata.version(p) for p in ("executorch", "transformers", "llama-cpp-python", "torch")},
            "rows": rows, "exportWalls": walls, "goals": results, "profiles": profiles}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
