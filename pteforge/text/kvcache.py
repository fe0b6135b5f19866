"""A KV cache written in place, and attention XNNPACK runs, for the CPU: ExecuTorch's
``llama::update_cache`` writes each new key and value where it lives (XNNPACK plus these
kernels is what ExecuTorch's own LLM runner ships), and attention is two matmuls and a
softmax over the cache with one causal bias, all inside XNNPACK.

Hugging Face's static cache writes each new key with ``index_copy_`` (a functional copy of
the whole cache, then a copy back) and builds its mask from ~10 operators per layer.
ExecuTorch's fused ``llama::custom_sdpa`` (used here before) took a quarter to a third of
each decoded token of Gemma 3 270M (9-25 ms for 18 one-token queries; ``bench/llm.py``).
The model's own code runs unchanged: the cache layers, the attention function and the mask
are swapped through the interfaces transformers provides for this (cache layers,
``AttentionInterface``, ``AttentionMaskInterface``).
"""
from __future__ import annotations

import contextlib
import functools
import inspect

ATTENTION = "pteforge_in_place_cache"


def load_ops() -> None:
    """Registers ``llama::`` for export (ATen) and for the runtime in this process."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401


def why_not(config, max_seq_len: int) -> str | None:
    """Why this model keeps transformers' own attention, or None when this module's computes
    what it computes: causal attention without logit soft-capping, every layer attending to
    every earlier position up to ``max_seq_len`` (a sliding window no shorter than that)."""
    if getattr(config, "attn_logit_softcapping", None):
        return "its attention soft-caps logits"
    window = getattr(config, "sliding_window", None)
    if window is not None and "sliding_attention" in (getattr(config, "layer_types", None) or ()) \
            and window < max_seq_len:
        return f"its sliding window ({window}) is shorter than --max-seq-len {max_seq_len}"
    if getattr(config, "use_bidirectional_attention", False):
        return "its attention is bidirectional"
    return None


def _attention(module, query, key, value, attention_mask, position_ids=None, scaling=None, **kwargs):
    """transformers' attention-function signature: query [B, Hq, S, D]; key and value the
    cache's [B, Hkv, max, D] views of [B, max, Hkv, D] buffers; ``attention_mask`` the
    additive [1, 1, S, max] bias of :func:`_mask`. Two batched matrix products and a
    softmax, all inside XNNPACK:

    - the query heads that share a key head are rows of one product, so the cache is read
      as it is, not repeated per head;
    - the products are ``bmm`` over (batch x key heads), not ``matmul``, which ExecuTorch
      decomposes into ``expand_copy`` + ``bmm``: the expands ran on the portable kernels and
      split each layer's XNNPACK program;
    - the bias is added to the scores seen by head group, [B, Hkv, G, S, max], broadcast
      rather than repeated per head (a repeat, also on the portable kernels);
    - with one key head the cache is reshaped, not copied: the reshapes are views of the
      buffer, which stay outside XNNPACK (``backends/xnnpack.py``), and XNNPACK's product
      reads the keys transposed (a transpose before the reshape made it a copy). With
      several, the copy is made anyway, and it makes the transpose: XNNPACK's product
      packs transposed keys slower than keys as they are (Gemma 3 270M's 36 products a
      decoded token: 0.77 ms against 0.34, ETDump)."""
    import torch

    batch, heads, length, dim = query.shape
    kv_heads, slots = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    rows = query.reshape(batch * kv_heads, groups * length, dim)  # heads h*groups..: key head h
    if kv_heads == 1:  # a view of the cache (outside XNNPACK), which XNNPACK's product reads transposed
        keys = key.reshape(batch, slots, dim).transpose(1, 2)
    else:  # a copy either way ([B, max, H, D] is not [B*H, max, D]): the transpose is made in it
        keys = key.transpose(-1, -2).reshape(batch * kv_heads, dim, slots)
    scores = torch.bmm(rows, keys) * (scaling if scaling is not None else dim ** -0.5)
    by_group = scores.view(batch, kv_heads, groups, length, slots) + attention_mask.unsqueeze(2)
    probs = torch.softmax(by_group, dim=-1).view(batch * kv_heads, groups * length, slots)
    out = torch.bmm(probs, value.reshape(batch * kv_heads, slots, dim))
    return out.view(batch, heads, length, dim).transpose(1, 2), None


def _mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, **kwargs):
    """Causal, as an additive bias [1, 1, q_length, kv_length]: 0 where a query may attend
    (a cache slot at or before its position), -inf elsewhere (slots not yet written)."""
    import torch

    rows = torch.arange(q_length) + q_offset  # the queries' positions
    cols = torch.arange(kv_length) + kv_offset
    keep = cols[None, :] <= rows[:, None]
    return torch.where(keep, 0.0, float("-inf"))[None, None]


@functools.cache
def _in_place_layer():
    """transformers' StaticLayer with the cache laid out and written as ``llama::`` wants."""
    from transformers.cache_utils import StaticLayer

    class InPlaceLayer(StaticLayer):
        """Keys and values in [B, max, H, D] (the layout ``update_cache`` writes), handed to
        attention as [B, H, max, D] views; the first position is ``cumulative_length``."""

        def lazy_initialization(self, key_states, value_states):
            import torch

            super().lazy_initialization(key_states, value_states)
            self.keys = torch.zeros(self.batch_size, self.max_cache_len, self.num_heads, self.k_head_dim,
                                    dtype=self.dtype, device=self.device)
            self.values = torch.zeros(self.batch_size, self.max_cache_len, self.num_heads, self.v_head_dim,
                                      dtype=self.dtype, device=self.device)

        def update(self, key_states, value_states, *args, **kwargs):
            import torch

            start = self.cumulative_length.item()
            torch._check(start >= 0)
            torch._check(start < self.max_cache_len)
            torch.ops.llama.update_cache(key_states.transpose(1, 2), self.keys, start)
            torch.ops.llama.update_cache(value_states.transpose(1, 2), self.values, start)
            if self.num_heads == 1:  # [B, max, 1, D] is [B, 1, max, D] in memory: a view, not a transpose
                shape = (self.batch_size, 1, self.max_cache_len, -1)
                return self.keys.view(shape), self.values.view(shape)
            return self.keys.transpose(1, 2), self.values.transpose(1, 2)

    return InPlaceLayer


@contextlib.contextmanager
def wrapped(model, max_cache_len: int):
    """The model behind an in-place cache of ``max_cache_len`` positions, called as
    ``forward(input_ids [1, S], cache_position [S]) -> logits [1, 1, vocab]`` (the last
    position's): the signature of transformers' own exportable module, so one runner drives
    both. The model's attention is this one inside the block only: the eager model
    stays the reference."""
    import torch
    from transformers import AttentionInterface
    from transformers.cache_utils import DummyLayer, StaticCache
    from transformers.integrations.executorch import get_head_shapes
    from transformers.masking_utils import AttentionMaskInterface

    load_ops()
    AttentionInterface.register(ATTENTION, _attention)
    AttentionMaskInterface.register(ATTENTION, _mask)
    config = model.config.get_text_config()

    class InPlaceCacheLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.cache = StaticCache(config=config, max_cache_len=max_cache_len)
            # a layer that reuses an earlier layer's keys and values (Gemma 4) keeps its empty one
            self.cache.layers = [layer if isinstance(layer, DummyLayer) else _in_place_layer()(max_cache_len)
                                 for layer in self.cache.layers]
            num_heads, head_dim = get_head_shapes(config)  # per layer where they differ (Gemma 4's full layers)
            self.cache.early_initialization(1, num_heads, head_dim, model.dtype, torch.device("cpu"))
            for i, layer in enumerate(self.cache.layers):
                if isinstance(layer, DummyLayer):
                    continue
                self.register_buffer(f"key_cache_{i}", layer.keys, persistent=False)
                self.register_buffer(f"value_cache_{i}", layer.values, persistent=False)
                self.register_buffer(f"cumulative_length_{i}", layer.cumulative_length, persistent=False)

        def forward(self, input_ids, cache_position):
            for layer in self.cache.layers:
                if isinstance(layer, DummyLayer):
                    continue
                layer.cumulative_length.copy_(cache_position[0])
            logits = self.model(input_ids=input_ids, position_ids=cache_position.unsqueeze(0), attention_mask=None,
                                past_key_values=self.cache, use_cache=True, **last).logits
            return logits[:, -1:]

    # Logits of the last position only, [1, 1, vocab]: what a runner samples from. Prefill
    # then runs the output matrix (Gemma 3 270M's is 168M of its 268M weights) once, not
    # once per prompt token; a verifier that wants every position feeds one token a call.
    last = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    configs = {id(c): c for c in (model.config, config)}.values()
    before = [c._attn_implementation for c in configs]
    for c in configs:
        c._attn_implementation = ATTENTION
    try:
        yield InPlaceCacheLM()
    finally:
        for c, was in zip(configs, before):
            c._attn_implementation = was
