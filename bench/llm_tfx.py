"""transformers' own ExecuTorch exporter (``transformers.exporters.exporter_executorch``) on a
checkpoint, for ``bench/llm.py``: export, and greedy generation with the programs it writes.

    python bench/llm_tfx.py export CKPT OUT --precision fp32|8da8w --max-seq-len N
    python bench/llm_tfx.py run OUT PROMPT_JSON DECODE THREADS    (prints one JSON line)

``export_for_generation`` writes two programs, ``prefill`` (a dynamic prompt length) and
``decode`` (one token), whose KV cache is an input and an output (a StaticCache, flattened).
Generation here is the loop its metadata describes: prefill on an empty cache, then decode
with the cache it returned, the attention mask of each step and its position. fp32 is its
default; ``8da8w`` is the closest it offers to pteforge's quantized programs, PT2E with
XNNPACK's quantizer, int8 weights per output channel and int8 activations quantized
dynamically (the embedding stays fp32).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def export(ckpt: str, out: str, precision: str, max_seq_len: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    quantizer = None
    if precision == "8da8w":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from transformers.exporters.quantizers import PT2EQuantizer

        config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
        quantizer = PT2EQuantizer(XNNPACKQuantizer().set_global(config))
    generation = GenerationConfig(cache_implementation="static", do_sample=False, max_cache_len=max_seq_len)
    ids = torch.tensor([[2, 818, 5279, 529, 7001, 563, 496, 3678]])
    t0 = time.perf_counter()
    exported = ExecutorchExporter().export_for_generation(
        model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
        ExecutorchConfig(backend="xnnpack", dynamic=True, quantizer=quantizer), generation_config=generation)
    seconds = time.perf_counter() - t0
    exported.save_pretrained(out)
    (Path(out) / "bench.json").write_text(json.dumps({"exportSeconds": seconds, "precision": precision}))


def masks(template: dict, position: int, length: int, window: int | None) -> dict:
    """The decode step's attention masks, as the program takes them: True where the new token
    at ``position`` may attend (every filled slot; a sliding layer's last ``window``)."""
    import torch

    slots = torch.arange(length)
    out = {}
    for kind in template:
        keep = slots <= position
        if kind == "sliding_attention" and window:
            keep &= slots > position - window
        out[kind] = keep.view(1, 1, 1, length)
    return out


def call(runner, **kwargs):
    """One run of a component's program. Its inputs are flattened without checking them
    against the traced tree: that tree holds the cache's Python-side position as a constant
    (the capture's), which every later step differs from; the program reads the tensor."""
    import torch

    leaves = torch.utils._pytree.tree_leaves(((), kwargs))
    return runner.unflatten(list(runner.method.execute([x.contiguous() if isinstance(x, torch.Tensor) else x for x in leaves])))


def run(out: str, prompt: list[int], decode: int, threads: int) -> dict:
    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from transformers import AutoConfig
    from transformers.cache_utils import Cache, StaticCache
    from transformers.exporters import ExportedModel
    from transformers.exporters.exporter_dynamo import _iter_subclasses, register_pytree_node

    from pteforge.core import system

    for kind in _iter_subclasses(Cache):  # what the exporter registers at export, for unflattening its outputs
        register_pytree_node(kind)
    torch.set_num_threads(1)
    _unsafe_reset_threadpool(threads)
    config = AutoConfig.from_pretrained(out)
    reset = system.reset_peak_rss()
    t0 = time.perf_counter()
    exported = ExportedModel.from_pretrained(out)
    prefill, step = exported.runners["prefill"], exported.runners["decode"]
    load_ms = (time.perf_counter() - t0) * 1000
    template = step.metadata.kwargs["attention_mask"]["leaves"]  # {kind: {"shape": [1, 1, 1, cache length]}}
    length = next(v["shape"][-1] for v in template.values())
    window = getattr(config, "sliding_window", None)
    t0 = time.perf_counter()
    result = call(prefill, input_ids=torch.tensor([prompt]), attention_mask={k: None for k in template},
                  position_ids=torch.arange(len(prompt)).unsqueeze(0),
                  past_key_values=StaticCache(config=config, max_cache_len=length))
    tokens = [int(result.logits[0, -1].numpy().argmax())]
    ttft = time.perf_counter() - t0
    t1 = time.perf_counter()
    for i in range(decode - 1):
        position = len(prompt) + i
        result = call(step, input_ids=torch.tensor([[tokens[-1]]]), attention_mask=masks(template, position, length, window),
                      position_ids=torch.tensor([[position]]), past_key_values=result.past_key_values)
        tokens.append(int(result.logits[0, -1].numpy().argmax()))
    decode_s = time.perf_counter() - t1
    return {"loadMs": load_ms, "ttftMs": ttft * 1000, "prefillTokensPerSecond": len(prompt) / ttft,
            "decodeTokensPerSecond": (decode - 1) / decode_s, "tokens": tokens, "peakRssMb": system.peak_rss_mb(reset)}


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3], sys.argv[sys.argv.index("--precision") + 1],
               int(sys.argv[sys.argv.index("--max-seq-len") + 1]))
    else:
        print(json.dumps(run(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))))
