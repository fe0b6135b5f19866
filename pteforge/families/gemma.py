"""Gemma: Gemma 3 270M, and Gemma 4 E2B, the text model the executorch_flutter app's chat runs;
any Hugging Face causal LM given with ``--llm`` joins this category too, the app's word for
text generation. Built, captured, lowered and proven by :mod:`pteforge.text.llm`."""

from __future__ import annotations

from .text import TextGenerationFamily


class GemmaFamily(TextGenerationFamily):
    word = "gemma"
    category = "gemma"
    models = ("gemma-3-270m", "gemma-4-e2b-it")
    model_help = ("Gemma 3 270M (google/gemma-3-270m, the default), or gemma-4-e2b-it (google/gemma-4-E2B-it, "
                  "the app's chat model): text generation with a KV cache")
    order = 60
    checkpoints = {
        "gemma-3-270m": {
            "id": "google/gemma-3-270m",
            "config": {
                "model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 640, "intermediate_size": 2048,
                "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                "max_position_embeddings": 32768, "sliding_window": 512, "query_pre_attn_scalar": 256,
                "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
                "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
            },
        },
        # The executorch_flutter app's chat model: Gemma 4 E2B's text model. Its eos ids are the
        # checkpoint's, [1, 106]: 106 ends a turn, which is where the chat stops.
        "gemma-4-e2b-it": {
            "id": "google/gemma-4-E2B-it",
            "config": {
                "model_type": "gemma4_text", "vocab_size": 262144, "hidden_size": 1536, "intermediate_size": 6144,
                "num_hidden_layers": 35, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
                "global_head_dim": 512, "attention_k_eq_v": False, "sliding_window": 512,
                "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7,
                "vocab_size_per_layer_input": 262144, "hidden_size_per_layer_input": 256, "num_kv_shared_layers": 20,
                "use_double_wide_mlp": True, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": 30.0, "tie_word_embeddings": True,
                "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0,
            },
        },
    }
