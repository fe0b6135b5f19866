"""Text generation: decoder-only language models, one program each with its KV cache.

The same run as every other model: a capture job per model (torch.export of the model
wrapped with a static KV cache, and of each weight-quantized variant) and one job per
target in the worker pool, rows merged into the manifest as they finish. What differs
is the program and its proof:

- the program is ``forward(input_ids[1, S], cache_position[S]) -> logits``, S dynamic
  (prefill) or 1 (decode), the cache a mutable buffer inside the program; the logits are the
  last position's ``[1, 1, vocab]`` where the cache is pteforge's (prefill runs the output
  matrix once), every position's ``[1, S, vocab]`` otherwise. For
  the CPU, the cache written in place and attention one kernel (``pteforge.text.kvcache``,
  ExecuTorch's ``llama::`` kernels); for other backends Hugging Face's
  ``TorchExportableModuleForDecoderOnlyLM``; and the constant methods
  ExecuTorch's LLM runner reads (``get_max_seq_len``, ``get_bos_id``, ``get_eos_ids``,
  ``get_vocab_size``, ``use_kv_cache``, ...);
- the proof is greedy decoding from a seeded prompt in a child process: at every step the
  program is fed eager's tokens, so its argmax must equal eager's and its logits are
  compared with eager's (SQNR per step), plus perplexity on a fixed text shipped here,
  prefill and decode tokens/s, load time and peak RSS.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, cast

from ..backends import program_check
from ..core import system
from ..core.errors import CaptureError, ModelError, UsageError, WeightsError
from ..core.result import Check, Stage, Status, Unavailable
from ..core.spec import ExportConfig, ModelSpec, Precision, Target
from ..core.units import pct
from ..families.text import (
    NEW_TOKENS,
    PROMPT_TOKENS,
    build,
    llm_backends,
    max_seq_len,
    supported,
)
from ..runtime.host import execute_in_place, load_forward, load_runtime
from ..runtime.isolate import ChildCrashed, IsolatedRuntime
from ..runtime.pte import program_delegates, program_operators
from ..stages.capture import Capture, variant_key
from ..stages.capture_failure import summarize_export_error
from ..stages.pipeline import MISMATCH_FIX, Ending, StageFailed, Steps, artifact_path
from ..stages.verify import compare, threshold_for
from . import kvcache
from .hqq import in_row_blocks
from .kvcache import load_ops

PERPLEXITY_TEXT = Path(__file__).parents[1] / "data" / "perplexity.txt"

# How each weight-quantized precision quantizes (the backends say which precisions they
# export language models at: ``llm_precisions``); every other backend gets one
# UNAVAILABLE row that says so.
# (ExecuTorch's quantize_model_ qlinear config, what it is). Weight-only int8 linears
# ("8w") come out of ExecuTorch 1.5.1's constant propagation as fp32 again (measured: the
# program 0.9 % smaller), so 8-bit weights are XNNPACK's dynamically quantized ones.
SCHEMES = {
    Precision.INT8_DYNAMIC_INT4: ("8da4w", "linear layers: int8 dynamic activations, int4 weights in groups of 32; "
                                           "embedding: int8 weights per row"),
    Precision.INT8_DYNAMIC_INT8: ("8da8w", "linear layers: int8 dynamic activations, int8 weights per output channel; "
                                           "embedding: int8 weights per row"),
}


def facts(config) -> dict:
    """What the runner and the manifest need: bos/eos ids, vocabulary size."""
    eos = config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    vocab = int(config.vocab_size)
    for key, ids in (("bos_token_id", [config.bos_token_id]), ("eos_token_id", eos)):
        outside = [i for i in ids if i is not None and not 0 <= i < vocab]
        if outside:  # a runner would feed or wait for a token the model does not have
            raise ModelError(f"config.json's {key} {outside[0]} is outside the model's vocabulary (vocab_size {vocab})",
                             fix=f"set {key} in config.json to the id of that token in the tokenizer")
    return {"vocabSize": vocab, "bosId": config.bos_token_id, "eosIds": eos}


def tokenizer_of(spec: ModelSpec):
    """The source's tokenizer when it has one here (a checkpoint directory, the Hugging
    Face cache); None otherwise — the proof then feeds token ids and says so, and no
    tokenizer is shipped. transformers makes an empty one for some architectures from
    config.json alone (Qwen's: one token, no ids for any text), which is none either: it
    would have been shipped to the app."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(spec.path, local_files_only=True)
    except Exception:  # noqa: BLE001 -- no tokenizer here is a fact, not a failure
        return None
    try:
        empty = len(tokenizer) < 2 or not tokenizer("the", add_special_tokens=False)["input_ids"]
    except Exception:  # noqa: BLE001 -- one that cannot encode a word is none either
        return None
    return None if empty else tokenizer


def text_ids(tokenizer, vocab: int, limit: int) -> tuple[list[int], str]:
    """The shipped text as token ids (its tokenizer, or UTF-8 bytes when there is none)."""
    text = PERPLEXITY_TEXT.read_text()
    ids = tokenizer(text, add_special_tokens=True)["input_ids"] if tokenizer is not None else []
    if len(ids) >= 2:
        return ids[:limit], "the model's tokenizer"
    why = "no tokenizer here" if tokenizer is None else f"its tokenizer gave {len(ids)} token(s) for the text"
    return [3 + b % (vocab - 3) for b in text.encode()][:limit], f"UTF-8 bytes as token ids ({why})"


# -- capture ------------------------------------------------------------------------------
def exportable(model, spec: ModelSpec, dynamic: bool = True, fused: bool = False):
    """torch.export of the model behind a static KV cache, sequence length dynamic (or one
    token per call, for backends that take no symbolic shapes). ``fused``: the cache written
    in place and attention one kernel (pteforge.text.kvcache), when ``fused_attention`` allows."""
    import torch
    from transformers import GenerationConfig
    from transformers.integrations.executorch import (
        TorchExportableModuleForDecoderOnlyLM,
    )


    length = max_seq_len(spec)
    ids, positions = (torch.tensor([[2, 3]], dtype=torch.long), torch.arange(2)) if dynamic else \
        (torch.tensor([[2]], dtype=torch.long), torch.arange(1))
    seq = torch.export.Dim("seq_length_dim", max=length - 1)
    shapes = {"input_ids": {1: seq}, "cache_position": {0: seq}} if dynamic else None
    if fused:
        with torch.no_grad(), kvcache.wrapped(model, length) as wrapper:
            return torch.export.export(wrapper, (), {"input_ids": ids, "cache_position": positions},
                                       dynamic_shapes=shapes, strict=True)
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static", max_length=length,
                                               cache_config={"batch_size": 1, "max_cache_len": length})
    wrapper = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=length)
    with torch.no_grad():
        return wrapper.export(input_ids=ids, cache_position=positions, dynamic_shapes=shapes, strict=True)


def fused_attention(model, spec: ModelSpec) -> bool:
    """Whether pteforge.text.kvcache computes what this model's own attention computes."""
    return kvcache.why_not(model.config.get_text_config(), max_seq_len(spec)) is None


def _int8_embedding(embedding):
    """An embedding with int8 weights per row, looked up by ExecuTorch's own
    ``quantized_decomposed::embedding_byte`` kernel (torchao's int8 embedding leaves a
    ``dequantize_affine`` that ExecuTorch 1.5.1 has no kernel for). Gemma's embedding
    scale (sqrt(hidden)) is kept."""
    import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401 -- registers the op
    import torch

    class _Int8Embedding(torch.nn.Module):
        def __init__(self, source):
            super().__init__()
            weight = source.weight.detach().float()
            scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-10)
            self.register_buffer("weight_int8", torch.round(weight / scales[:, None]).clamp(-128, 127).to(torch.int8))
            self.register_buffer("scales", scales)
            scale = getattr(source, "embed_scale", None)
            self.embed_scale = None if scale is None else float(scale)

        def forward(self, ids):
            out = torch.ops.quantized_decomposed.embedding_byte.dtype(
                self.weight_int8, self.scales, None, -128, 127, ids, dtype=torch.float32)
            return out if self.embed_scale is None else out * self.embed_scale

    return _Int8Embedding(embedding)


def quantize_source(model, precision: Precision):
    """ExecuTorch's LLM weight quantization (``quantize_model_``, torchao) on a copy of the
    eager model: its linear layers as SCHEMES says, its token embeddings (and Gemma 4's
    per-layer ones) int8 per row."""
    import torch
    from executorch.extension.llm.export.quantize import quantize_model_


    model = copy.deepcopy(model)
    if model.config.tie_word_embeddings:  # untie: the head and the embedding are quantized differently
        head = model.get_output_embeddings()
        head.weight = torch.nn.Parameter(head.weight.detach().clone(), requires_grad=False)
    model.set_input_embeddings(_int8_embedding(model.get_input_embeddings()))
    per_layer = getattr(getattr(model, "base_model", model), "embed_tokens_per_layer", None)
    if per_layer is not None:  # Gemma 4's per-layer input embeddings: a table larger than the token embedding
        model.set_per_layer_input_embeddings(_int8_embedding(per_layer))
    with warnings.catch_warnings(), in_row_blocks():  # the same scales as torchao's, ~5x sooner
        warnings.simplefilter("ignore")  # "quantize_model_ is experimental"
        quantize_model_(model, qlinear_config=SCHEMES[precision][0], skip_incompatible_shapes=True)
    return model


def greedy_reference(model, prompt: list[int], steps: int) -> tuple[list[int], list]:
    """Eager greedy decoding without a cache: the tokens, and the logits of each step
    (step 0: the prompt's last position)."""
    import torch

    ids, logits = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            last = model(torch.tensor([ids])).logits[0, -1].clone()
            logits.append(last)
            ids.append(int(last.argmax()))
    return ids[len(prompt):], logits


def proof_reference(model, spec: ModelSpec, seed: int, tokenizer) -> dict:
    """What the proof compares a program with, from eager: greedy tokens and logits for a
    seeded prompt, the shipped text's ids and perplexity, and the runner's facts."""
    import torch

    info = facts(model.config)
    generator = torch.Generator().manual_seed(seed)
    bos = info["bosId"] if info["bosId"] is not None else 0
    prompt = [bos] + torch.randint(3, info["vocabSize"], (PROMPT_TOKENS,), generator=generator).tolist()
    tokens, logits = greedy_reference(model, prompt, NEW_TOKENS)
    ids, how = text_ids(tokenizer, info["vocabSize"], max_seq_len(spec) - 1)
    with torch.no_grad():
        text_logits = model(torch.tensor([ids])).logits[0]
    return {"prompt": prompt, "tokens": tokens, "logits": torch.stack(logits), "text_ids": ids,
            "text_tokens": how, "perplexity": perplexity(text_logits, ids), **info}


def judge(proof: dict, precision: Precision, tolerance: float | None) -> str | None:
    """Why a generation proof fails (None: it passes): fp32 must give every one of eager's
    tokens; every precision must reach its logits SQNR."""
    threshold = threshold_for(precision.value, tolerance)
    proof["thresholdSqnrDb"] = threshold
    exact = precision is Precision.FP32
    if proof["minSqnrDb"] >= threshold and (proof["tokenAgreement"] == 1.0 or not exact):
        return None
    return (f"greedy tokens agree with eager on {pct(proof['tokenAgreement'])}% of {proof['steps']} steps, "
            f"logits SQNR {proof['minSqnrDb']:.1f} dB (needs {'every token and ' if exact else ''}{threshold:.0f} dB)")


def capture(spec: ModelSpec, config: ExportConfig, work_dir: Path, model=None, on_stage=None, variants: tuple = (),
            main: bool = True):
    """Build once; capture fp32 and save eager's proof (``main``), and capture each
    weight-quantized variant (without ``main``: only those, in a job of their own)."""
    import torch

    from ..core.io import check_writable_tmp

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    model = model if model is not None else build(spec, config.weights, config.seed)
    timings[Stage.BUILD.value] = time.perf_counter() - t0
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    pt2, ref = work_dir / f"{spec.name}.pt2", work_dir / f"{spec.name}.reference.pt"
    reference = _reference(model, spec, config, work_dir, timings) if main else None
    try:
        with check_writable_tmp(work_dir):
            fusable = fused_attention(model, spec) and spec.cache_in_place
            if main:
                t0 = time.perf_counter()
                torch.export.save(exportable(model, spec, fused=fusable), str(pt2))
                timings[Stage.CAPTURE.value] = time.perf_counter() - t0
                torch.save(reference, ref)
            saved = _capture_variants(model, spec, work_dir, variants, fusable, str(pt2), timings)
    except Exception as exc:
        if isinstance(exc, (UsageError, WeightsError)):
            raise
        raise CaptureError(summarize_export_error(exc), fix="see https://pytorch.org/docs/stable/export.html") from exc
    return Capture(spec.name, str(pt2) if main else "", str(ref) if main else "", timings, saved)


def _reference(model, spec: ModelSpec, config: ExportConfig, work_dir: Path, timings: dict) -> dict:
    """Eager's proof, and the tokenizer it was made with, saved beside the capture."""
    t0 = time.perf_counter()
    tokenizer = tokenizer_of(spec)
    reference = proof_reference(model, spec, config.seed, tokenizer)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(work_dir / "tokenizer"))
        reference["tokenizer"] = str(work_dir / "tokenizer")
    timings[Stage.REFERENCE.value] = time.perf_counter() - t0
    return reference


def _capture_variants(model, spec: ModelSpec, work_dir: Path, variants: tuple, fusable: bool, main_pt2: str,
                      timings: dict) -> dict[str, str]:
    """{"backend:precision": .pt2} for each variant: weights quantized before capture, one
    token per call, or transformers' own attention; one file for each kind of capture (the
    main capture's kind is its file)."""
    import torch

    from ..backends import default_registry

    if not variants:
        return {}
    t0 = time.perf_counter()
    registry = default_registry()
    made: dict[tuple, str] = {(None, True, fusable): main_pt2}
    saved = {}
    for backend, precision in variants:
        dynamic = registry.get(backend).llm_dynamic_shapes
        kind = (precision if precision.quantized else None, dynamic,
                fusable and dynamic and registry.get(backend).llm_fused_attention)
        if kind not in made:
            path = work_dir / (f"{spec.name}.{precision.value if kind[0] else 'float'}"
                               f"{'' if kind[1] else '.static'}{'.fused' if kind[2] else ''}.pt2")
            source = quantize_source(model, precision) if kind[0] else model
            torch.export.save(exportable(source, spec, dynamic=kind[1], fused=kind[2]), str(path))
            made[kind] = str(path)
        saved[variant_key(backend, precision)] = made[kind]
    timings[Stage.CAPTURE_VARIANTS.value] = time.perf_counter() - t0
    return saved


def perplexity(logits, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of each next token."""
    import torch

    if len(ids) < 2:
        return float("nan")
    nll = torch.nn.functional.cross_entropy(logits[:-1].double(), torch.tensor(ids[1:]), reduction="mean")
    return float(torch.exp(nll))


class TextGeneration(Steps):
    """The steps of one (language model, target), in the pipeline every model goes through
    (:func:`pteforge.stages.pipeline.export_target`): quantized before capture (the capture's
    variant), lowered with the constant methods ExecuTorch's LLM runner reads, proven by
    greedy decoding in a child process from the written program, shipped with its tokenizer."""

    capture: Any = staticmethod(capture)  # as Steps.capture: the class's step, an instance's Capture
    reference: dict | None = None  # eager's proof data (vocabulary, special ids, tokenizer), once loaded
    proof: dict | None = None  # the child's greedy-decoding proof, once run

    def unsupported(self) -> tuple[str, str] | None:
        ok, why = supported(self.target)
        if ok:
            return None
        assert why is not None  # supported: a reason with every refusal
        return why, f"use --backends {' '.join(_target_words())}"

    def load(self):
        import torch


        load_ops()  # the capture may call llama:: ops: registered before it deserializes
        self.reference = torch.load(self.capture.reference_path, weights_only=True)
        precision = self.target.precision
        pt2 = self.capture.variants.get(variant_key(self.primary.name, precision), self.capture.pt2_path)
        try:
            return self.timed(Stage.LOAD, lambda: torch.export.load(pt2)), None, None
        except Exception as exc:  # noqa: BLE001 -- the row fails, the run goes on
            raise StageFailed(Status.LOWER_FAILED, exc) from exc

    def quantize(self, exported, plan, example):
        """Quantized before capture, when the precision asks (``quantize_source``): says how."""
        precision = self.target.precision
        if precision in SCHEMES:
            self.record.quantization = {
                "scheme": f"{self.primary.name} {precision.value}: {SCHEMES[precision][1]}",
                "recipe": f"executorch.extension.llm.export.quantize.quantize_model_(qlinear_config={SCHEMES[precision][0]!r})"}
        return exported

    def lower(self, exported, plan):
        try:
            assert self.reference is not None  # load() read it
            return _lower(exported, self.primary, self.target.precision, self.spec, self.reference, self.timed)
        except Exception as exc:  # noqa: BLE001 -- the row fails, the run goes on
            raise StageFailed(Status.LOWER_FAILED, exc) from exc

    def prove(self, program, data: bytes, delegation, here) -> tuple[Ending, None]:
        """Greedy decoding in a child process, from the program written where it is proven."""
        from ..core.io import write_atomic

        unproven = self.unproven(program_check(here, delegation.delegates_in_program, delegation.kernels))
        if unproven:
            return unproven, None
        final = artifact_path(self.config.out_dir, self.spec, self.target)
        self.staged = final.with_name(f".{final.stem}.unproven.pte")
        self.timed(Stage.WRITE, lambda: write_atomic(self.staged, data))
        self.proof = _generate(self.staged, self.capture.reference_path, self.primary, self.config.timeout, self.timed)
        reason = judge(self.proof, self.target.precision, self.config.tolerance)
        return (Ending(Status.MISMATCH, reason, MISMATCH_FIX) if reason else Ending(Status.VERIFIED)), None

    def write(self, program, data: bytes, delegation, reference, failed: bool = False) -> None:
        """The program, and its tokenizer beside it as the app reads it."""
        super().write(program, data, delegation, reference, failed)
        artifact, ref = self.record.artifact, self.reference
        assert artifact is not None and ref is not None  # written just above; read by load()
        path = Path(artifact.path)
        self.record.generation = {"maxSeqLen": max_seq_len(self.spec), "vocabSize": ref["vocabSize"],
                                  "bosId": ref["bosId"], "eosIds": ref["eosIds"],
                                  "tokenizer": ship_tokenizer(ref, self.spec, path.parent)}
        if self.proof is not None:
            self.record.generation["proof"] = self.proof


def default_targets() -> tuple[list[str], list]:
    """What ``--gemma``/``--llm`` export with no --backends: every language-model precision
    of the backends that lower here; and one UNAVAILABLE line (not requested, so it does not
    fail the run) for every other backend, saying why."""
    from ..backends import default_registry

    lowerable = {b.name for b in default_registry() if b.lower_check().ok}
    # cast: a backend without language-model precisions is refused, with a reason (supported)
    others = [Unavailable(b.name, Check(False, cast(str, supported(Target((b.name,), b.default_precision))[1])), requested=False)
              for b in default_registry() if not b.llm_precisions]
    return [w for w in _target_words() if w.split(":")[0] in lowerable], others


def _target_words() -> list[str]:
    """Each backend's language-model precisions as targets (its default precision bare)."""
    return [b.name if p is b.default_precision else f"{b.name}:{p.value}" for b in llm_backends() for p in b.llm_precisions]


def _lower(exported, backend, precision: Precision, spec: ModelSpec, reference: dict, timed):
    from executorch.exir import (
        EdgeCompileConfig,
        ExecutorchBackendConfig,
        to_edge_transform_and_lower,
    )
    from executorch.exir.passes import MemoryPlanningPass

    from ..stages.lower import delegation_of

    length = max_seq_len(spec)
    methods = {
        "get_max_seq_len": length, "get_max_context_len": length, "get_vocab_size": reference["vocabSize"],
        "get_bos_id": reference["bosId"] if reference["bosId"] is not None else 0,
        "get_eos_ids": reference["eosIds"], "use_kv_cache": True,
        "use_sdpa_with_kv_cache": any("custom_sdpa" in str(n.target) for n in exported.graph.nodes),
        "enable_dynamic_shape": backend.llm_dynamic_shapes,
    }
    partitioners = backend.llm_partitioners(precision)
    passes = backend.llm_transform_passes()
    with backend.lowering_context():
        edge = timed(Stage.LOWER, lambda: to_edge_transform_and_lower(
            backend.llm_prepare(exported), partitioner=partitioners, constant_methods=methods,
            compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True),
            **({"transform_passes": passes} if passes else {})))
    delegation = delegation_of(edge.exported_program().graph_module)
    config = ExecutorchBackendConfig(extract_delegate_segments=True, do_quant_fusion_and_const_prop=True,
                                     memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))
    program = timed(Stage.SERIALIZE, lambda: edge.to_executorch(config))
    delegation.delegates_in_program = program_delegates(program.executorch_program)
    delegation.kernels = sorted(set(program_operators(program.executorch_program)))
    return program, bytes(program.buffer), delegation


def ship_tokenizer(reference: dict, spec: ModelSpec, dest: Path) -> dict | None:
    """The tokenizer beside the program: Hugging Face's files in ``<model>-tokenizer/``, and
    the vocabulary and special tokens as the executorch_flutter app reads them
    (``<model>_vocab.json``, ``<model>_tokenizer_config.json``); paths relative to the manifest."""
    from ..core.io import write_atomic

    source = reference.get("tokenizer")
    if not source:
        return None
    folder = dest / f"{spec.name}-tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for f in sorted(Path(source).iterdir()):
        shutil.copyfile(f, folder / f.name)
        files.append(f"{dest.name}/{folder.name}/{f.name}")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    vocab = dest / f"{spec.name}_vocab.json"
    write_atomic(vocab, json.dumps(tok.get_vocab(), ensure_ascii=False).encode())
    app_config = {
        "vocab_size": len(tok), "bos_token": tok.bos_token, "eos_token": tok.eos_token,
        "pad_token": tok.pad_token or tok.eos_token, "model_max_length": max_seq_len(spec),
        "special_tokens": {"bos_token_id": reference["bosId"], "eos_token_id": (reference["eosIds"] or [None])[0],
                           "pad_token_id": tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id},
    }
    write_atomic(dest / f"{spec.name}_tokenizer_config.json", json.dumps(app_config, indent=2).encode())
    shipped = {"dir": f"{dest.name}/{folder.name}", "files": files, "vocabFile": f"{dest.name}/{vocab.name}",
               "configFile": f"{dest.name}/{spec.name}_tokenizer_config.json"}
    return {**shipped, **tokenizer_kind(folder)}


def tokenizer_kind(folder: Path) -> dict:
    """``model``: tokenizer.json's model type; ``appNote`` where the executorch_flutter app's
    chat cannot read it (its tokenizer takes a BPE tokenizer.json, a SentencePiece .model or
    TikToken, and refuses WordPiece and Unigram)."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        readable = any(folder.glob("*.model"))
        return {} if readable else {"appNote": "no tokenizer.json or SentencePiece .model: the app's chat has no "
                                              "tokenizer it can read"}
    kind = json.loads(path.read_text()).get("model", {}).get("type")
    if kind == "BPE":
        return {"model": kind}
    return {"model": kind, "appNote": f"tokenizer.json is {kind}: the app's chat reads BPE tokenizers only"}


def _generate(path: Path, reference_path: str, backend, timeout: float, timed) -> dict:
    """The child's proof of the program at ``path``: a crash, or a program that does not load
    or run, fails the row (RUN_FAILED, LOAD_FAILED)."""
    try:
        with IsolatedRuntime(timeout=timeout) as child:
            reply = timed(Stage.VERIFY, lambda: child.call(
                generate, path=str(path), reference=reference_path, dynamic=backend.llm_dynamic_shapes))
    except ChildCrashed as exc:
        raise StageFailed(Status.RUN_FAILED, RuntimeError(f"the runtime crashed generating: {exc}")) from exc
    if not reply["ok"]:
        raise StageFailed(Status.LOAD_FAILED if reply.get("stage") == "load" else Status.RUN_FAILED,
                          RuntimeError(reply["error"]))
    return {k: v for k, v in reply.items() if k != "ok"}


# -- in the runtime child ---------------------------------------------------------------------
def generate(req: dict) -> dict:
    """Load the program, then: prefill the seeded prompt and decode with eager's tokens fed
    back (argmax agreement and logits SQNR per step, decode tokens/s); prefill the shipped
    text from position 0 (perplexity, prefill tokens/s)."""
    import torch



    ref = torch.load(req["reference"], weights_only=True)
    reset = system.reset_peak_rss()  # the peak RSS from here on: this program alone, where the OS can say it

    load_runtime()  # the runtime's import (~10 s) is not the program's load time
    t0 = time.perf_counter()
    program, method = load_forward(req["path"])  # a failure here says so (llm._prove: LOAD_FAILED)
    load_ms = (time.perf_counter() - t0) * 1000

    def run(ids: list[int], start: int, every: bool = False):
        """Logits and seconds: one call, or one per token (static programs, or ``every``
        position's logits from a program that returns the last one only)."""
        t = time.perf_counter()
        chunks = [ids] if req.get("dynamic", True) and not every else [[i] for i in ids]
        outs = []
        for k, chunk in enumerate(chunks):
            at = start + sum(len(c) for c in chunks[:k])
            outs.append(execute_in_place(method, [torch.tensor([chunk], dtype=torch.long),
                                                  torch.arange(at, at + len(chunk))])[0][0].clone())
        return outs[0] if len(outs) == 1 else torch.cat(outs), time.perf_counter() - t

    prompt, tokens = ref["prompt"], ref["tokens"]
    logits, prefill_s = run(prompt, 0)
    steps, decode_s = [logits[-1]], []
    for i, token in enumerate(tokens[:-1]):
        out, seconds = run([token], len(prompt) + i)
        steps.append(out[-1])
        decode_s.append(seconds)
    sqnr = [round(min(compare([e], [a])["sqnr"], 200.0), 2) for e, a in zip(ref["logits"], steps)]
    produced = [int(s.argmax()) for s in steps]
    agree = sum(int(p == t) for p, t in zip(produced, tokens)) / len(tokens)
    ids = ref["text_ids"]
    ppl, text_s = _text_run(run, ids)
    return {
        "prompt": prompt, "eagerTokens": tokens, "tokens": produced, "steps": len(tokens),
        "tokenAgreement": agree, "firstDifference": next((i for i, (p, t) in enumerate(zip(produced, tokens)) if p != t), None),
        "sqnrDbPerStep": sqnr, "minSqnrDb": min(sqnr),
        "perplexity": {"text": PERPLEXITY_TEXT.name, "tokens": len(ids), "tokenizedWith": ref["text_tokens"],
                       "eagerFp32": ref["perplexity"], "program": ppl,
                       "changePercent": 100.0 * (ppl / ref["perplexity"] - 1.0) if ref["perplexity"] else None},
        "prefillTokensPerSecond": len(ids) / text_s, "prefillTokens": len(ids),
        "decodeTokensPerSecond": len(decode_s) / sum(decode_s) if decode_s else None,
        "promptPrefillMs": prefill_s * 1000,
        "loadMs": load_ms, "peakRssMb": system.peak_rss_mb(reset),
    }


def _text_run(run, ids: list[int]) -> tuple[float, float]:
    """The shipped text prefilled from position 0: the program's perplexity on it, and the
    median seconds of three prefills."""
    seconds = []
    for _ in range(3):
        logits, took = run(ids, 0)
        seconds.append(took)
    if len(logits) < len(ids):  # the last position's logits only: every position, a token a call
        logits, _ = run(ids, 0, every=True)
    return perplexity(logits, ids), sorted(seconds)[1]


def describe(generation: dict | None) -> str | None:
    """One clause for the summary: what the proof and the speed say."""
    proof = (generation or {}).get("proof")
    if not proof:
        return None
    ppl = proof["perplexity"]
    change = f", perplexity {ppl['changePercent']:+.2f} %" if ppl.get("changePercent") is not None and math.isfinite(ppl["changePercent"]) else ""
    return (f"greedy tokens {pct(proof['tokenAgreement'])}% of {proof['steps']} equal eager, logits SQNR ≥ "
            f"{proof['minSqnrDb']:.1f} dB{change}; prefill {proof['prefillTokensPerSecond']:.0f} tok/s, decode "
            f"{proof['decodeTokensPerSecond']:.0f} tok/s, load {proof['loadMs']:.0f} ms"
            + (f", peak RSS {proof['peakRssMb']:.0f} MB" if proof.get("peakRssMb") is not None else ""))
