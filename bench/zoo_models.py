"""Factories for the zoo's public models that need a few lines around them.

Each builds a public architecture with its published configuration and random weights
(nothing is downloaded); pteforge calls them as ``zoo_models:NAME`` factories.
"""

from __future__ import annotations

import torch


class _Outputs(torch.nn.Module):
    """Returns the named outputs of a model that returns a dict or a ModelOutput, as a tuple."""

    def __init__(self, model: torch.nn.Module, keys: tuple[str, ...]):
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, *inputs):
        out = self.model(*inputs)
        return tuple(out[k] for k in self.keys)


class _SsdHead(torch.nn.Module):
    def __init__(self, ssd):
        super().__init__()
        self.backbone, self.head = ssd.backbone, ssd.head

    def forward(self, x):
        out = self.head(list(self.backbone(x).values()))
        return out["bbox_regression"], out["cls_logits"]


def ssdlite_head() -> torch.nn.Module:
    """torchvision's SSDLite320 MobileNetV3-Large: backbone and detection head, raw box
    regressions and class logits (its anchors' decoding and NMS run in the app)."""
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    return _SsdHead(ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None))


def bert_mini() -> torch.nn.Module:
    """BERT-mini (4 layers, hidden 256, 4 heads: google-research/bert's small models),
    a text encoder over 128 token ids."""
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                        attn_implementation="sdpa")
    return _Outputs(BertModel(config), ("last_hidden_state", "pooler_output"))


def whisper_tiny_encoder() -> torch.nn.Module:
    """The encoder of openai/whisper-tiny (4 layers, d_model 384, 6 heads) over 30 s of
    80-bin log-mel features."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                           num_mel_bins=80, max_source_positions=1500, attn_implementation="sdpa")
    return _Outputs(WhisperEncoder(config), ("last_hidden_state",))
