"""A retrieval checkpoint's text tower in NumPy: the search command line's fast cold start.

`earshot search` embeds a few queries and exits; importing torch and transformers' BERT cost ~5 s of the ~6 s
such a call took on 2 cores. `TextTower` runs the same forward pass (a BERT-style encoder, first-token or mean
pooling, a linear or 2-layer projection, L2 normalisation) in NumPy float32 with the same tokenizer and
weights; tests/test_search_service.py and tests/test_retrieval_aisfx.py check it against the PyTorch model.
Only what it reproduces exactly is taken (a BERT encoder with absolute positions, exact GELU, a
`tokenizer.json` and `.safetensors` weights); for anything else `load_text_tower` returns None and the caller
loads the PyTorch model.
"""
from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.finite import require_finite
from models.captions import DEFAULT_TEXT_MODEL, preprocess_caption, resolve_model_path

PREFIX = "text_encoder.model."  # the Hugging Face encoder inside RetrievalModel.text_encoder
LAYER_NORM_EPS = 1e-12  # BertConfig's default (the tiny test encoders use it)
CACHE_SIZE = 256
BATCH = 64  # sequences per forward pass when embedding many texts (file sentences at index time)


@dataclass
class BertSettings:
    heads: int
    eps: float
    max_tokens: int  # truncation length including [CLS]/[SEP]
    pooling: str = "cls"  # or "mean" over all tokens (sentence-transformers MiniLM; the aiSFX retrieval model)


class TextTower:
    """Captions -> (N, dim) unit vectors, as `RetrievalModel.embed_text` gives them; no torch."""

    def __init__(self, tokenizer: Any, weights: dict[str, np.ndarray], proj_w: np.ndarray,  # noqa: ANN401
                 proj_b: np.ndarray, settings: BertSettings, name: str, model_id: str,
                 proj2: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.tokenizer = tokenizer  # a tokenizers.Tokenizer: truncation set, no padding
        # BERT tensors by their Hugging Face names, float32, aligned and contiguous (a tensor read from a file can
        # be unaligned, which sends NumPy to a slow non-BLAS matmul); linear weights stored transposed (in, out)
        self.w = {k: np.ascontiguousarray(v.T if _is_linear(k, v) else v, dtype=np.float32)
                  for k, v in weights.items()}
        self.proj_w, self.proj_b = np.ascontiguousarray(proj_w), np.ascontiguousarray(proj_b)  # (dim, H), (dim,)
        self.settings = settings
        self.name, self.model_id = name, model_id
        # a 2-layer projection (Linear -> ReLU -> Linear, RetrievalConfig.proj_layers=2): its second layer
        self.proj2 = None if proj2 is None else tuple(np.ascontiguousarray(a, dtype=np.float32) for a in proj2)
        self.dim = int((proj2[0] if proj2 is not None else proj_w).shape[0])
        self.layers = 1 + max(int(k.split(".")[2]) for k in weights if k.startswith("encoder.layer."))
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.source: str | None = None  # the installed encoder file the weights came from (None: the checkpoint)

    def shares_encoder_with(self, other: TextTower) -> bool:
        """Same BERT weights file and settings: one forward pass can serve both (see `embed_with_mean`)."""
        return (self.source is not None and self.source == other.source and self.settings.heads
                == other.settings.heads and self.settings.eps == other.settings.eps)

    def embed_with_mean(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """One forward pass, two vectors: this tower's (pooled and projected as `embed_text` does) and the
        mean-pooled sentence vector of the same hidden states (what a `SentenceEncoder` on the same weights
        gives for the text after caption preprocessing: the same for a query without punctuation). The search
        service embeds a query for the sound and the names channels at once this way when the retrieval
        model's text encoder is the frozen MiniLM. (dim,), (H,)"""
        ids = np.asarray(self.tokenizer.encode(preprocess_caption(text)).ids, dtype=np.int64)  # (T,)
        lengths = np.array([len(ids)])  # (1,)
        h = self._encode(ids[None], lengths)[0]  # (T, H)
        proj = self._pool(h[None], lengths)[0]  # (dim,)
        mean = h.mean(axis=0)
        require_finite(proj[None], f"{self.name}: text embeddings")
        self._remember(text, proj)
        return proj, (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)

    def embed_text(self, texts: list[str]) -> np.ndarray:
        """N texts -> (N, dim) float32 unit vectors; a non-finite output is refused (a broken model). Texts not
        in the cache are embedded together (`embed_batch`), then cached."""
        out = np.zeros((len(texts), self.dim), np.float32)
        # the cached vectors are read first: remembering the new ones may evict them
        cached = {t: self._cache[t] for t in dict.fromkeys(texts) if t in self._cache}
        missing = [t for t in dict.fromkeys(texts) if t not in cached]
        if missing:
            vecs = self.embed_batch(missing)  # (M, dim)
            require_finite(vecs, f"{self.name}: text embeddings")
            fresh = dict(zip(missing, vecs, strict=True))
            for t, v in list(fresh.items())[-CACHE_SIZE:]:
                self._remember(t, v)
        else:
            fresh = {}
        for i, text in enumerate(texts):
            out[i] = fresh[text] if text in fresh else cached[text]
        return out

    def _remember(self, text: str, vec: np.ndarray) -> None:
        self._cache[text] = vec
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)

    def embed_batch(self, texts: Sequence[str], batch: int = BATCH) -> np.ndarray:
        """N texts -> (N, dim) unit vectors, `batch` sequences per forward pass. Sorted by token count first, so
        each batch pads to nearly its own length (names are short, tag text can be long). No cache."""
        ids = [self._token_ids(t) for t in texts]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.zeros((len(ids), self.dim), np.float32)
        for start in range(0, len(order), batch):
            rows = order[start:start + batch]
            lengths = np.array([len(ids[i]) for i in rows])  # (B,)
            padded = np.zeros((len(rows), int(lengths.max())), np.int64)  # (B, T), pad id 0 is masked out
            for j, i in enumerate(rows):
                padded[j, : lengths[j]] = ids[i]
            out[rows] = self._pool(self._encode(padded, lengths), lengths)
        return out

    def _token_ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(preprocess_caption(text)).ids

    def _pool(self, h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """(B, T, H) hidden states -> (B, dim) unit vectors: this model's pooling (the first token, or the mean
        over each row's real tokens) and projection layers."""
        if self.settings.pooling == "mean":
            pooled = masked_mean(h, lengths)  # (B, H)
        else:
            pooled = h[:, 0]  # (B, H)
        e = pooled @ self.proj_w.T + self.proj_b  # (B, dim)
        if self.proj2 is not None:  # Linear -> ReLU -> Linear
            e = np.maximum(e, 0.0) @ self.proj2[0].T + self.proj2[1]
        return unit_rows(e)

    def _encode(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """(B, T) token ids, right-padded, with each row's real length (B,) -> (B, T, H) last hidden states of
        BertModel in eval mode. Keys past a row's length are masked out, so each real token's output is the one
        its sequence gives unpadded (the outputs at padded positions are junk, for the pooling to leave out)."""
        w, eps = self.w, self.settings.eps
        B, T = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:T]
             + w["embeddings.token_type_embeddings.weight"][0])  # (B, T, H)
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        # (B, 1, 1, T) additive mask; None when nothing is padded (a single query: no mask work)
        mask = None
        if (lengths < T).any():
            mask = np.where(np.arange(T)[None, :] < lengths[:, None], 0.0, -1e9).astype(np.float32)[:, None, None]
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            x = layer_norm(x + linear(self._attention(x, p, mask), w, p + "attention.output.dense"),
                           w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps)
            h = gelu(linear(x, w, p + "intermediate.dense"))  # (B, T, 4H)
            x = layer_norm(x + linear(h, w, p + "output.dense"),
                           w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
        return x

    def _attention(self, x: np.ndarray, p: str, mask: np.ndarray | None) -> np.ndarray:
        """Multi-head self-attention, padded keys masked. (B, T, H) -> (B, T, H)"""
        B, T, H = x.shape
        nh = self.settings.heads
        q, k, v = (linear(x, self.w, p + f"attention.self.{n}").reshape(B, T, nh, H // nh).transpose(0, 2, 1, 3)
                   for n in ("query", "key", "value"))  # (B, nh, T, dh)
        scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(H // nh))  # (B, nh, T, T)
        if mask is not None:
            scores = scores + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        att = scores / scores.sum(axis=-1, keepdims=True)
        return (att @ v).transpose(0, 2, 1, 3).reshape(B, T, H)


def masked_mean(h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(B, T, H) hidden states of right-padded rows -> (B, H): the mean over each row's real tokens."""
    real = (np.arange(h.shape[1])[None, :] < lengths[:, None]).astype(np.float32)  # (B, T)
    return (h * real[..., None]).sum(axis=1) / lengths[:, None].astype(np.float32)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """(N, D) -> (N, D) float32 rows of length 1 (a zero row stays zero)."""
    return (x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


SMALL_ROWS = 48  # token rows below which linear() takes the transposed product (a typed query's few tokens)


def _is_linear(name: str, w: np.ndarray) -> bool:
    return w.ndim == 2 and name.startswith("encoder.layer.") and name.endswith(".weight")


def linear(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    """nn.Linear with the weight stored transposed: (..., in) -> (..., out). Flattened to one 2-D product (one
    BLAS call: a stacked (B, T, in) @ (in, out) is not one)."""
    weight = w[name + ".weight"]
    flat = x.reshape(-1, x.shape[-1])  # (B*T, in)
    if len(flat) <= SMALL_ROWS:  # a query: OpenBLAS runs the transposed product 1.5x faster at a few rows
        y = np.ascontiguousarray((weight.T @ flat.T).T) + w[name + ".bias"]
    else:
        y = flat @ weight + w[name + ".bias"]  # (B*T, out)
    return y.reshape(*x.shape[:-1], weight.shape[1])


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below float32 resolution at GELU's scale)."""
    # in place on two float32 buffers: the (B, T, 4H) GELU input is the biggest tensor of a batched pass
    t = np.abs(x, dtype=np.float32)
    t *= 0.3275911
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * 1.061405429
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):  # Horner: poly = t * (c + poly)
        poly += c
        poly *= t
    e = np.square(x, dtype=np.float32)
    np.negative(e, out=e)
    np.exp(e, out=e)
    poly *= e  # poly * exp(-x^2)
    np.subtract(1.0, poly, out=poly)
    return np.copysign(poly, x, out=poly)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, BERT's "gelu"."""
    y = erf(x * np.float32(1 / np.sqrt(2.0)))
    y += 1.0
    y *= x
    y *= 0.5
    return y.astype(np.float32, copy=False)


# ---------------------------------------------------------------------------------------------- loading


def load_text_tower(path: str | os.PathLike[str], name: str, model_id: str) -> TextTower | None:
    """The text tower of a retrieval checkpoint, or None when it is not a BERT this module reproduces."""
    from safetensors import SafetensorError

    from core.checkpoints import CheckpointError, read_metadata

    meta = read_metadata(path)
    if meta["kind"] != "retrieval":
        raise CheckpointError(f"{Path(path).name}: this is a {meta['kind']!r} checkpoint, not a retrieval model")
    text_cfg = dict(meta["config"].get("text") or {})
    source = _encoder_source(text_cfg)
    if source is None:
        return None
    tok_dir, weights_file, settings = source
    try:
        read = _read_tower_tensors(path)
    except TypeError:  # a dtype NumPy has no type for (bfloat16, float8): the PyTorch loader reads it
        return None
    except (SafetensorError, OSError, ValueError) as e:  # read_metadata checked the header: damage found later
        raise CheckpointError(f"{Path(path).name}: cannot read the text tower's weights ({e})") from None
    if read is None:
        return None
    weights, proj_w, proj_b, proj2 = read
    source = None
    if not weights:  # frozen encoder left out of the file: the installed model's weights
        if weights_file is None:
            return None
        weights = _read_encoder(weights_file)
        source = str(weights_file.resolve())
    weights = {k: v.astype(np.float32, copy=False) for k, v in weights.items()}
    if proj_w.ndim != 2 or "embeddings.word_embeddings.weight" not in weights \
            or weights["embeddings.word_embeddings.weight"].shape[1] != proj_w.shape[1]:
        return None  # let the PyTorch loader name the mismatch
    tower = TextTower(_tokenizer(tok_dir, settings.max_tokens), weights, proj_w.astype(np.float32),
                      proj_b.astype(np.float32), settings, name, model_id, proj2)
    tower.source = source
    return tower


def _read_tower_tensors(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray,
                                                             tuple[np.ndarray, np.ndarray] | None] | None:
    """(encoder tensors by BERT name, projection weight and bias, the 2-layer projection's second layer) of a
    retrieval checkpoint, or None when it has no text projection this module knows."""
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        keys = set(f.keys())
        proj2 = None
        if {"text_proj.0.weight", "text_proj.0.bias", "text_proj.2.weight", "text_proj.2.bias"} <= keys:
            proj_w, proj_b = f.get_tensor("text_proj.0.weight"), f.get_tensor("text_proj.0.bias")
            proj2 = (f.get_tensor("text_proj.2.weight"), f.get_tensor("text_proj.2.bias"))
        elif {"text_proj.weight", "text_proj.bias"} <= keys:
            proj_w, proj_b = f.get_tensor("text_proj.weight"), f.get_tensor("text_proj.bias")
        else:
            return None
        weights = {k[len(PREFIX):]: f.get_tensor(k) for k in keys if k.startswith(PREFIX)}
    return weights, proj_w, proj_b, proj2


def _encoder_source(text_cfg: dict[str, Any]) -> tuple[Path, Path | None, BertSettings] | None:
    """(tokenizer folder, encoder weights file or None, settings) for a plain BERT text config, else None."""
    pooling = text_cfg.get("pooling", "cls")
    if pooling not in ("cls", "mean"):
        return None
    max_tokens = int(text_cfg.get("max_tokens", 32))
    tiny = bool(text_cfg.get("tiny", False))
    name_or_path = text_cfg.get("name_or_path", DEFAULT_TEXT_MODEL)
    tok_source = text_cfg.get("tokenizer") or (DEFAULT_TEXT_MODEL if tiny else name_or_path)
    try:
        tok_dir = Path(resolve_model_path(str(tok_source)))
    except FileNotFoundError:
        return None
    if not (tok_dir / "tokenizer.json").is_file():
        return None
    if tiny:  # models.text.load_encoder: BertConfig defaults apart from the sizes (weights in the checkpoint)
        return tok_dir, None, BertSettings(int(text_cfg.get("tiny_heads", 2)), LAYER_NORM_EPS, max_tokens, pooling)
    try:
        model_dir = Path(resolve_model_path(str(name_or_path)))
        hf = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    plain_bert = (hf.get("model_type") == "bert" and hf.get("hidden_act", "gelu") == "gelu"
                  and hf.get("position_embedding_type", "absolute") == "absolute")
    if not plain_bert:
        return None
    weights = model_dir / "model.safetensors"
    return tok_dir, weights if weights.is_file() else None, BertSettings(
        int(hf["num_attention_heads"]), float(hf.get("layer_norm_eps", LAYER_NORM_EPS)), max_tokens, pooling)


def _read_encoder(path: Path) -> dict[str, np.ndarray]:
    """A Hugging Face BERT's tensors by BertModel names (a leading 'bert.' dropped, pooler and buffers kept out)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    from core.checkpoints import CheckpointError, read_header

    read_header(path)  # the bounded checks first: a damaged file is a CheckpointError that names it
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, TypeError) as e:
        raise CheckpointError(f"{path.name}: cannot read the text encoder's weights ({e})") from None
    out = {}
    for k, v in tensors.items():
        k = k.removeprefix("bert.")
        if k.startswith(("embeddings.", "encoder.")) and not k.endswith("position_ids"):
            out[k] = v
    return out


def _tokenizer(folder: Path, max_tokens: int) -> Any:  # noqa: ANN401 - a tokenizers.Tokenizer
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()  # one query at a time: no padding, so attention needs no mask
    tok.enable_truncation(max_length=max_tokens)  # as TextEncoder.tokenize: max_tokens includes [CLS]/[SEP]
    return tok


# ------------------------------------------------------------------------------------- sentence vectors

TEXT_MODEL = "all-MiniLM-L6-v2"
TEXT_MAX_TOKENS = 128  # names, folders and tags: longer tag text is cut (the model was trained up to 128 too)


class SentenceEncoder(TextTower):
    """all-MiniLM-L6-v2 sentence vectors in NumPy, as sentence-transformers makes them: the mean of the last
    hidden states over all tokens ([CLS] and [SEP] included: no padding, so the mask is all ones), L2-normalised.
    (N, 384). The library's text channel embeds each file's name/folder/tag words with it, the search service
    the query; no torch."""

    def __init__(self, tokenizer: Any, weights: dict[str, np.ndarray], settings: BertSettings,  # noqa: ANN401
                 name: str = TEXT_MODEL) -> None:
        dim = int(weights["embeddings.word_embeddings.weight"].shape[1])
        super().__init__(tokenizer, weights, np.eye(dim, dtype=np.float32), np.zeros(dim, np.float32), settings,
                         name, f"text:{name}")
        self._lock = threading.Lock()

    def embed_text(self, texts: list[str]) -> np.ndarray:
        with self._lock:  # one encoder serves the indexer and the GUI's searches: its cache is not thread-safe
            return super().embed_text(texts)

    @classmethod
    def sharing(cls, tower: TextTower, name: str = TEXT_MODEL, max_tokens: int = TEXT_MAX_TOKENS) -> SentenceEncoder:
        """A sentence encoder on the weights a text tower already holds (the default retrieval model's frozen
        MiniLM): no second copy of the weights in memory, no second load (the search command line starts
        faster)."""
        from tokenizers import Tokenizer

        enc = cls.__new__(cls)
        enc.tokenizer = Tokenizer.from_str(tower.tokenizer.to_str())
        enc.tokenizer.no_padding()
        enc.tokenizer.enable_truncation(max_length=max_tokens)
        enc.w, enc.layers = tower.w, tower.layers
        enc.settings = BertSettings(tower.settings.heads, tower.settings.eps, max_tokens)
        hidden = int(tower.w["embeddings.word_embeddings.weight"].shape[1])
        enc.proj_w, enc.proj_b = np.eye(hidden, dtype=np.float32), np.zeros(hidden, np.float32)
        enc.dim, enc.name, enc.model_id, enc.source = hidden, name, f"text:{name}", tower.source
        enc._cache = OrderedDict()
        enc._lock = threading.Lock()
        return enc

    def _token_ids(self, text: str) -> list[int]:
        # the text as written: the '. ' between a file's name, folder and tag parts helps MiniLM keep them apart
        # (stripping punctuation cost 0.014 mAP@10 on the search-quality benchmark)
        return self.tokenizer.encode(text).ids

    def _pool(self, h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """(B, T, H) -> (B, H): the mean over each row's real tokens (padding left out), L2-normalised."""
        return unit_rows(masked_mean(h, lengths))


def default_encoder_file() -> str | None:
    """The installed MiniLM's weights file (resolved), or None when it is not installed."""
    try:
        path = Path(resolve_model_path(DEFAULT_TEXT_MODEL)) / "model.safetensors"
    except FileNotFoundError:
        return None
    return str(path.resolve()) if path.is_file() else None


def load_sentence_encoder(name_or_path: str = DEFAULT_TEXT_MODEL, max_tokens: int = TEXT_MAX_TOKENS
                          ) -> SentenceEncoder | None:
    """The MiniLM sentence encoder from the installed wheel (or a local folder), or None when it is not there
    (the text channel then searches by keywords only)."""
    try:
        folder = Path(resolve_model_path(name_or_path))
        hf = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    weights_file = folder / "model.safetensors"
    if not weights_file.is_file() or not (folder / "tokenizer.json").is_file() or hf.get("model_type") != "bert":
        return None
    weights = {k: v.astype(np.float32, copy=False) for k, v in _read_encoder(weights_file).items()}
    settings = BertSettings(int(hf["num_attention_heads"]), float(hf.get("layer_norm_eps", LAYER_NORM_EPS)),
                            max_tokens)
    name = TEXT_MODEL if name_or_path == DEFAULT_TEXT_MODEL else Path(name_or_path).name
    enc = SentenceEncoder(_tokenizer(folder, max_tokens), weights, settings, name)
    enc.source = str(weights_file.resolve())
    return enc
