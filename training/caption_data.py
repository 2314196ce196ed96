"""Caption data sets for text-to-audio retrieval: readers for four layouts, audio decoding, crops, padding,
batches of (clip, caption) pairs and caption-swap augmentation.

Every reader returns `CaptionItem`s (audio path, list of captions, split): Earshot's own caption folder
(`captions.csv`, e.g. shared/data/sfx), Clotho v2, AudioCaps (rows grouped by clip; the audio found by
several names, `STEM_SUFFIXES`) and WavCaps JSON. The layouts, their columns and how each finds its audio:
docs/corpora.md.
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from core import audio as audio_path

# a caption row may name a file without its extension: these are tried, in this order (the formats caption data
# sets ship in; all of them in core.audio.SUPPORTED_EXTENSIONS, tests/test_caption_data.py checks)
STEM_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg")
_CAPTION_COLUMN = re.compile(r"caption(_\d+)?$")


@dataclass
class CaptionItem:
    path: Path
    captions: list[str]
    split: str | None = None


@dataclass
class SkipReport:
    """Files that could not be used: counted, with the first few names and reasons kept for the message."""

    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, name: str, reason: str, keep: int = 5) -> None:
        self.count += 1
        if len(self.examples) < keep:
            self.examples.append(f"{name} ({reason})")

    def message(self) -> str:
        if not self.count:
            return ""
        more = f", … ({self.count - len(self.examples)} more)" if self.count > len(self.examples) else ""
        return f"skipped {self.count} unusable audio file(s): {', '.join(self.examples)}{more}"


# ------------------------------------------------------------------------------------------------ readers


def read_caption_folder(root: str | Path, split: str | None = None) -> list[CaptionItem]:
    """`captions.csv` (path, caption[, caption_2...][, split]) -> items; `split` keeps only that split."""
    root = Path(root)
    items = []
    with open(root / "captions.csv", newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        if "path" not in fields or "caption" not in fields:
            raise ValueError(f"{root / 'captions.csv'}: needs columns 'path' and 'caption' (has {fields})")
        columns = sorted((c for c in fields if _CAPTION_COLUMN.fullmatch(c)), key=_caption_order)
        for row in reader:
            captions = [row[c].strip() for c in columns if (row.get(c) or "").strip()]
            item_split = (row.get("split") or "").strip() or None
            if captions and _in_split(item_split, split):
                items.append(CaptionItem(root / row["path"], captions, item_split))
    return items


def _caption_order(column: str) -> int:
    return 1 if column == "caption" else int(column.split("_")[1])


def _in_split(item_split: str | None, wanted: str | None) -> bool:
    """No split asked: everything; a split asked of data without split column: everything counts as train."""
    if wanted is None:
        return True
    return item_split == wanted or (item_split is None and wanted == "train")


def read_clotho(root: str | Path, split: str) -> list[CaptionItem]:
    """Clotho v2: `clotho_captions_{split}.csv` (file_name, caption_1..caption_5), audio in `{split}/`."""
    root = Path(root)
    items = []
    with open(root / f"clotho_captions_{split}.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            captions = [row[k].strip() for k in sorted(row) if k.startswith("caption_") and (row[k] or "").strip()]
            if captions:
                items.append(CaptionItem(root / split / row["file_name"], captions, split))
    return items


def read_audiocaps(csv_path: str | Path, split: str | None = None) -> tuple[list[CaptionItem], int]:
    """AudioCaps CSV -> (items grouped by youtube_id, number of rows whose audio was not found)."""
    csv_path = Path(csv_path)
    split = split or csv_path.stem
    base = csv_path.parent
    folders = [base / split, base / "audio" / split, base / "audio", base]
    by_clip: dict[str, CaptionItem] = {}
    missing = 0
    with open(csv_path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            yid, cap_id, start = row["youtube_id"], row.get("audiocap_id", ""), row.get("start_time", "")
            caption = (row.get("caption") or "").strip()
            if yid in by_clip:
                if caption:
                    by_clip[yid].captions.append(caption)
                continue
            stems = [yid, f"Y{yid}", f"{yid}_{start}", cap_id]
            path = _first_existing([d / f"{s}{e}" for d in folders for s in stems if s for e in STEM_SUFFIXES])
            if path is None or not caption:
                missing += 1
                continue
            by_clip[yid] = CaptionItem(path, [caption], split)
    return list(by_clip.values()), missing


def read_wavcaps(json_path: str | Path, audio_dir: str | Path | None = None) -> list[CaptionItem]:
    """WavCaps JSON {"data": [{"id"/"audio", "caption"}]} -> items (split None); audio under `audio_dir`."""
    json_path = Path(json_path)
    audio_dir = Path(audio_dir) if audio_dir is not None else json_path.parent
    data = json.loads(json_path.read_text(encoding="utf-8"))
    entries = data["data"] if isinstance(data, dict) else data
    items = []
    for entry in entries:
        name = str(entry.get("audio") or entry.get("id") or "")
        caption = str(entry.get("caption") or "").strip()
        if not name or not caption:
            continue
        path = audio_dir / name
        if not path.suffix:
            path = _first_existing([audio_dir / f"{name}{e}" for e in STEM_SUFFIXES]) or path
        items.append(CaptionItem(path, [caption], None))
    return items


def _first_existing(paths: Sequence[Path]) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def load_caption_dataset(path: str | Path, split: str | None = None) -> list[CaptionItem]:
    """Pick the reader from what `path` holds: a caption folder, a Clotho folder, an AudioCaps CSV (or a
    folder with `{split}.csv`), or a WavCaps JSON."""
    path = Path(path)
    if path.is_dir():
        if (path / "captions.csv").is_file():
            return read_caption_folder(path, split)
        if split and (path / f"clotho_captions_{split}.csv").is_file():
            return read_clotho(path, split)
        if split and (path / f"{split}.csv").is_file():
            return read_audiocaps(path / f"{split}.csv", split)[0]
        raise ValueError(f"{path}: no captions.csv, clotho_captions_{split}.csv or {split}.csv found")
    if path.suffix == ".json":
        return read_wavcaps(path)
    if path.suffix == ".csv":
        return read_audiocaps(path, split)[0]
    raise ValueError(f"{path}: not a caption data set (a folder, an AudioCaps .csv or a WavCaps .json)")


# ------------------------------------------------------------------------------------------------ audio


def load_audio(path: str | Path, sample_rate: int) -> torch.Tensor:
    """Decode any soundfile-readable file -> (N,) float32 mono at `sample_rate` (the one audio path).

    Raises an `AudioError` (a ValueError) naming the file for unreadable, empty or truncated audio.
    """
    return torch.from_numpy(audio_path.decode(path, sample_rate, max_seconds=None).audio)


def load_items_audio(
    items: Sequence[CaptionItem], sample_rate: int, skipped: SkipReport | None = None
) -> Iterator[tuple[int, torch.Tensor]]:
    """(index, wave) for every readable item; unreadable or empty files go into `skipped`."""
    for i, item in enumerate(items):
        try:
            yield i, load_audio(item.path, sample_rate)
        except (OSError, ValueError) as e:  # AudioError is a ValueError
            if skipped is not None:
                skipped.add(item.path.name, str(e).splitlines()[0][:80] if str(e) else type(e).__name__)


# ------------------------------------------------------------------------------------------------ batching


def random_crop(x: torch.Tensor, max_frames: int, generator: random.Random | None = None,
                multiple: int = 1) -> torch.Tensor:
    """(C, T) -> a random window of at most `max_frames` frames along the last axis.

    With `multiple` > 1 the length is cut down to a multiple of it (but kept >= multiple where possible), so
    that clips in a batch share few distinct lengths (PaSST patches: frames past the last patch are unused).
    """
    rng = generator or random
    T = x.shape[-1]
    n = min(T, max_frames)
    if multiple > 1 and n >= multiple:
        n -= n % multiple
    start = rng.randint(0, T - n)
    return x[..., start : start + n]


def pad_batch(xs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """List of (C, T_i) -> zero-padded (B, C, T_max) and (B,) lengths."""
    lengths = torch.tensor([x.shape[-1] for x in xs], dtype=torch.long)
    T = int(lengths.max())
    return torch.stack([F.pad(x, (0, T - x.shape[-1])) for x in xs]), lengths


@dataclass
class PairBatch:
    clip_indices: list[int]  # unique clips of the batch (indices into the data set)
    captions: list[str]  # one per pair, after augmentation
    audio_ids_of_captions: torch.Tensor  # (B_t,) row of each caption's clip in clip_indices


def pair_batches(
    captions_per_clip: Sequence[Sequence[str]], batch_size: int, rng: random.Random, drop_last: bool = True
) -> list[list[tuple[int, int]]]:
    """Every (clip, caption number) pair once per epoch, shuffled, cut into batches."""
    pairs = [(c, k) for c, caps in enumerate(captions_per_clip) for k in range(len(caps))]
    rng.shuffle(pairs)
    batches = [pairs[i : i + batch_size] for i in range(0, len(pairs), batch_size)]
    if drop_last and len(batches) > 1 and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


def collate_pairs(
    pairs: Sequence[tuple[int, int]], captions_per_clip: Sequence[Sequence[str]],
    augment: CaptionAugmenter | None = None,
) -> PairBatch:
    """Dedupe the clips of a batch; each caption points at its clip's row."""
    clips: list[int] = []
    row_of: dict[int, int] = {}
    ids, captions = [], []
    for clip, k in pairs:
        if clip not in row_of:
            row_of[clip] = len(clips)
            clips.append(clip)
        ids.append(row_of[clip])
        caption = captions_per_clip[clip][k]
        captions.append(augment(caption) if augment is not None else caption)
    return PairBatch(clips, captions, torch.tensor(ids, dtype=torch.long))


# ------------------------------------------------------------------------------------------------ captions


def load_paraphrases(path: str | Path) -> dict[str, list[str]]:
    """Paraphrase file -> {caption: [paraphrases]}.

    JSON: {"caption": ["para", ...]} (a single string is one paraphrase). CSV: first column the caption, the
    other non-empty columns its paraphrases (a header row whose first cell is 'caption' is skipped); a
    caption on several rows collects all of them.
    """
    path = Path(path)
    out: dict[str, list[str]] = {}
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        for caption, paras in data.items():
            out[caption.strip()] = [paras] if isinstance(paras, str) else [str(p) for p in paras]
        return out
    with open(path, newline="", encoding="utf-8") as f:
        for i, row in enumerate(csv.reader(f)):
            if not row or (i == 0 and row[0].strip().lower() == "caption"):
                continue
            paras = [p.strip() for p in row[1:] if p.strip()]
            out.setdefault(row[0].strip(), []).extend(paras)
    return out


class CaptionAugmenter:
    """With probability p, swap a caption for one of its paraphrases (captions without any stay as they are)."""

    def __init__(self, paraphrases: dict[str, list[str]], p: float, rng: random.Random | None = None) -> None:
        self.paraphrases = {k: v for k, v in paraphrases.items() if v}
        self.p = p
        self.rng = rng or random.Random(0)

    def __call__(self, caption: str) -> str:
        options = self.paraphrases.get(caption.strip())
        if not options or self.p <= 0 or self.rng.random() >= self.p:
            return caption
        return self.rng.choice(options)

    def all_texts(self) -> list[str]:
        return [p for paras in self.paraphrases.values() for p in paras]
