"""Check a training data folder before training: what is there, and what the trainer would trip over.

`validate_data(kind, folder)` returns a `DataReport`: counts (files, audio files, total duration, speakers,
words, captions, clips per split), problems (unreadable or empty files by name, words missing from CMUdict,
missing CSV columns, listed paths that do not exist, an empty folder) and warnings (extra columns, no dev
split, little audio). It is cheap: CSVs are read once, audio headers only (`core.audio.audio_info`), and at most
`max_checked` audio files are opened (an even sample of the rest; totals are extrapolated and marked so).
`validate_job` is the same check as a job that yields progress, for big folders and the GUI.

`ok` says whether the trainer can run on the folder at all. A folder can be ok and still list problems: the
trainers skip unreadable files and unknown words, and the report names them so the user can fix them.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import audio as audio_path
from core import kinds

Job = Generator[dict[str, Any], None, Any]

KINDS = kinds.NAMES  # each kind's checker below is named in core/kinds.py (its `validator`)
WORDS_TABLES = ("words.csv", "metadata.csv")
UNITS_TABLES = ("words.csv", "metadata.csv", "utterances.csv")  # the units trainer's order
DEV_SPLITS = ("dev", "val", "valid", "validation")
MAX_CHECKED = 2000  # audio headers opened per validation; the rest is extrapolated
MIN_UNITS_SECONDS = 60.0  # less speech than this trains a useless codebook
_EXAMPLES = 5  # names listed per problem
_CAPTION_COLUMN = re.compile(r"caption(_\d+)?$")


@dataclass
class DataReport:
    kind: str
    folder: str
    ok: bool = False
    counts: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    layout: str = ""  # what was recognised: words.csv, metadata.csv (FSDD), captions.csv, Clotho, ...

    def summary(self) -> str:
        """One line: what is there, or the first problem."""
        c = self.counts
        parts = [self.layout] if self.layout else []
        for key, label in (("rows", "row"), ("clips", "clip"), ("audio_files", "audio file"),
                           ("speakers", "speaker"), ("words", "word"), ("captions", "caption")):
            if c.get(key):
                parts.append(f"{c[key]} {label}" + ("" if c[key] == 1 else "s"))
        if c.get("total_duration_s"):
            approx = "~" if c.get("duration_estimated") else ""
            parts.append(f"{approx}{c['total_duration_s'] / 60:.1f} min")
        text = ", ".join(parts) or "nothing found"
        return text if self.ok else f"not usable: {self.problems[0] if self.problems else text}"


def examples(items: Iterable[str], count: int | None = None) -> str:
    """'a, b, c, … (12 more)' for a problem message."""
    items = list(items)
    n = len(items) if count is None else count
    shown = ", ".join(items[:_EXAMPLES])
    return shown + (f", … ({n - _EXAMPLES} more)" if n > _EXAMPLES else "")


def validate_data(kind: str, folder: str | Path, max_checked: int = MAX_CHECKED) -> DataReport:
    """Check `folder` as training data for `kind` (words | units | retrieval); see the module docstring."""
    job = validate_job(kind, folder, max_checked)
    while True:
        try:
            next(job)
        except StopIteration as stop:
            return stop.value


def validate_job(kind: str, folder: str | Path, max_checked: int = MAX_CHECKED) -> Job:
    """Job: the same check as `validate_data`, yielding progress while audio headers are read."""
    check = kinds.get(kind).validate()  # an unknown kind: KindError (a ValueError) naming the known ones
    path = Path(folder).expanduser()
    report = DataReport(kind, str(path))
    if not path.exists():
        report.problems.append(f"{path}: no such folder")
        return report
    if path.is_dir() and not any(path.iterdir()):
        report.problems.append(f"{path}: the folder is empty")
        return report
    return (yield from check(path, report, max_checked))


# ------------------------------------------------------------------------------------------------ audio


@dataclass
class _AudioCheck:
    checked: int = 0
    seconds: float = 0.0
    bad: dict[str, str] = field(default_factory=dict)  # name -> why
    rates: set[int] = field(default_factory=set)


def _check_audio(paths: list[Path], root: Path, max_checked: int, report: DataReport) -> Job:
    """Read the headers of (an even sample of) `paths`; fill counts and problems. Paths must exist."""
    k = min(len(paths), max(0, max_checked))
    sample = [paths[i * len(paths) // k] for i in range(k)]  # an even spread over the folder
    result = _AudioCheck()
    for i, p in enumerate(sample):
        name = _rel(p, root)
        try:
            if p.stat().st_size == 0:
                result.bad[name] = "empty file"
            else:
                info = audio_path.audio_info(p)
                if info.frames <= 0:
                    result.bad[name] = "no audio in it"
                else:
                    result.seconds += info.frames / info.sample_rate
                    result.rates.add(info.sample_rate)
        except (audio_path.AudioError, OSError) as e:
            why = str(e).removeprefix(f"{audio_path.display_name(p)}: ")  # the report names the file already
            result.bad[name] = f"unreadable: {why.splitlines()[0][:80]}"
        result.checked += 1
        if (i + 1) % 50 == 0 or i + 1 == len(sample):
            yield {"step": i + 1, "total": len(sample), "message": f"checking audio {i + 1}/{len(sample)}"}
    c = report.counts
    c["audio_files"] = len(paths)
    c["audio_files_checked"] = result.checked
    good = result.checked - len(result.bad)
    estimated = result.checked < len(paths)
    c["total_duration_s"] = round(result.seconds * (len(paths) / result.checked if estimated and result.checked
                                                    else 1.0), 1)
    c["duration_estimated"] = estimated
    c["sample_rates"] = sorted(result.rates)
    c["unreadable"] = len(result.bad)
    if result.bad:
        empty = [n for n, why in result.bad.items() if not why.startswith("unreadable")]
        broken = [f"{n} ({why})" for n, why in result.bad.items() if why.startswith("unreadable")]
        of = f" of {result.checked} checked" if estimated else ""
        if broken:
            report.problems.append(f"{len(broken)} unreadable audio file(s){of}: {examples(broken)}")
        if empty:
            report.problems.append(f"{len(empty)} empty audio file(s){of}: {examples(empty)}")
    if result.checked and good == 0:
        report.problems.append("none of the audio files could be read")
    return good


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _find_audio(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in audio_path.SUPPORTED_EXTENSIONS and p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


# ------------------------------------------------------------------------------------------------ tables


def _read_csv(path: Path, report: DataReport) -> tuple[list[str], list[dict[str, str]]] | None:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = [c.strip() for c in (reader.fieldnames or [])]
            rows = [{(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None}
                    for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        report.problems.append(f"{path.name}: cannot read it as CSV ({e})")
        return None
    if not columns:
        report.problems.append(f"{path.name}: no header line (expected column names such as path,...)")
        return None
    return columns, rows


def _check_columns(name: str, columns: list[str], required: tuple[str, ...], known: tuple[str, ...],
                   report: DataReport) -> bool:
    missing = [c for c in required if c not in columns]
    if missing:
        report.problems.append(f"{name}: missing column(s) {', '.join(missing)} (has {', '.join(columns)}; "
                               f"expected {','.join(known)})")
        return False
    extra = [c for c in columns if c not in known and not _CAPTION_COLUMN.fullmatch(c)]
    if extra:
        report.warnings.append(f"{name}: extra column(s) ignored: {', '.join(extra)}")
    return True


def _listed_paths(rows: list[dict[str, str]], root: Path, table: str, report: DataReport) -> list[Path]:
    """Existing files named by the rows' `path` column (each once); missing ones become a problem."""
    seen: dict[str, Path] = {}
    missing: list[str] = []
    blank = 0
    for row in rows:
        rel = row.get("path", "")
        if not rel:
            blank += 1
            continue
        if rel in seen:
            continue
        p = root / rel
        if p.is_file():
            seen[rel] = p
        elif rel not in missing:
            missing.append(rel)
    if blank:
        report.problems.append(f"{table}: {blank} row(s) without a path")
    if missing:
        report.problems.append(f"{table}: {len(missing)} listed file(s) do not exist: {examples(missing)}")
    report.counts["missing_files"] = len(missing)
    return list(seen.values())


def _splits(rows: list[dict[str, str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        s = row.get("split", "").lower() or "(none)"
        out[s] = out.get(s, 0) + 1
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------------ kinds


def check_words(root: Path, report: DataReport, max_checked: int) -> Job:
    if not root.is_dir():
        report.problems.append(f"{root}: not a folder (spoken words: a folder with words.csv)")
        return report
    table = next((root / n for n in WORDS_TABLES if (root / n).is_file()), None)
    if table is None:
        report.problems.append(f"{root.name}: no words.csv (columns path,word,speaker[,split]) or FSDD-style "
                               "metadata.csv")
        return report
    report.layout = table.name + (" (FSDD)" if table.name == "metadata.csv" else "")
    read = _read_csv(table, report)
    if read is None:
        return report
    columns, rows = read
    known = ("path", "word", "speaker", "split", "synthetic", "phonemes")
    known_fsdd = known + ("digit", "index", "duration_s", "sample_rate")
    if not _check_columns(table.name, columns, ("path", "word"), known_fsdd if "digit" in columns else known,
                          report):
        return report
    if "speaker" not in columns:
        report.warnings.append(f"{table.name}: no speaker column: speaker counts and speaker splits unavailable")
    no_word = sum(1 for r in rows if r.get("path") and not r.get("word"))
    if no_word:
        report.problems.append(f"{table.name}: {no_word} row(s) without a word")
    rows = [r for r in rows if r.get("word")]
    from models.phonemes import default_lexicon, normalise_word

    lexicon = default_lexicon()
    words = sorted({normalise_word(r["word"]) for r in rows})
    has_pron = {normalise_word(r["word"]) for r in rows if r.get("phonemes")}
    oov = [w for w in words if w not in has_pron and w not in lexicon]
    if oov:
        report.problems.append(f"{len(oov)} word(s) not in the CMU pronouncing dictionary (skipped unless a "
                               f"phonemes column gives ARPAbet): {examples(oov)}")
    c = report.counts
    c.update(rows=len(rows), words=len(words), oov_words=len(oov),
             speakers=len({r.get("speaker", "") for r in rows if r.get("speaker")}), splits=_splits(rows))
    paths = _listed_paths(rows, root, table.name, report)
    good = yield from _check_audio(paths, root, max_checked, report)
    usable_words = len(set(words) - set(oov))
    if usable_words < 2:
        report.problems.append(f"training needs at least two different dictionary words (found {usable_words})")
    if not any(s in c["splits"] for s in DEV_SPLITS):
        report.warnings.append("no dev split: the trainer holds out 10% of the training rows as dev")
    report.ok = bool(paths) and good > 0 and usable_words >= 2
    return report


def check_units(root: Path, report: DataReport, max_checked: int) -> Job:
    if not root.is_dir():
        report.problems.append(f"{root}: not a folder (speech for units: a folder of audio files)")
        return report
    table = next((root / n for n in UNITS_TABLES if (root / n).is_file()), None)
    c = report.counts
    if table is not None:
        report.layout = table.name
        read = _read_csv(table, report)
        if read is None:
            return report
        columns, rows = read
        known = ("path", "speaker", "split", "word", "synthetic", "phonemes", "text", "digit", "index",
                 "duration_s", "sample_rate")
        if not _check_columns(table.name, columns, ("path",), known, report):
            return report
        if "speaker" not in columns:
            report.warnings.append(f"{table.name}: no speaker column: every utterance is one unknown speaker")
        c.update(rows=len(rows), speakers=len({r.get("speaker") or "unknown" for r in rows}), splits=_splits(rows))
        if "split" in columns and not any(r.get("split") == "train" for r in rows):
            report.warnings.append(f"{table.name}: no rows in split 'train' (the trainer's default split)")
        paths = _listed_paths(rows, root, table.name, report)
    else:
        report.layout = "folder of audio files"
        paths = _find_audio(root)
        c["rows"] = len(paths)  # no speakers counted: the trainer reads them all as one, "unknown"
        if not paths:
            shown = ", ".join(sorted(audio_path.SUPPORTED_EXTENSIONS))
            report.problems.append(f"{root.name}: no audio files ({shown}) and no utterances.csv")
            return report
        report.warnings.append("no utterances.csv: every file is one unknown speaker (add path,speaker rows for "
                               "voice swaps)")
    good = yield from _check_audio(paths, root, max_checked, report)
    if good and c["total_duration_s"] < MIN_UNITS_SECONDS:
        report.warnings.append(f"only {c['total_duration_s']:.0f} s of speech: unit discovery needs minutes")
    report.ok = bool(paths) and good > 0
    return report


def check_retrieval(root: Path, report: DataReport, max_checked: int) -> Job:
    from training import caption_data

    items: list[Any] = []
    if root.is_dir() and (root / "captions.csv").is_file():
        report.layout = "captions.csv"
        read = _read_csv(root / "captions.csv", report)
        if read is None:
            return report
        columns, rows = read
        known = ("path", "caption", "split", "source_package", "license", "source_file", "duration_s")
        if not _check_columns("captions.csv", columns, ("path", "caption"), known, report):
            return report
        cap_cols = [col for col in columns if _CAPTION_COLUMN.fullmatch(col)]
        no_caption = sum(1 for r in rows if not any(r.get(col) for col in cap_cols))
        if no_caption:
            report.problems.append(f"captions.csv: {no_caption} row(s) without any caption")
        rows = [r for r in rows if any(r.get(col) for col in cap_cols)]
        report.counts.update(clips=len(rows), captions=sum(1 for r in rows for col in cap_cols if r.get(col)),
                             splits=_splits(rows))
        paths = _listed_paths(rows, root, "captions.csv", report)
    else:
        try:
            items, layout = _caption_items(root, caption_data)
        except (ValueError, KeyError, OSError, json.JSONDecodeError) as e:
            report.problems.append(f"{root.name}: {e}")
            return report
        if not items:
            report.problems.append(f"{root.name}: no captioned clips found (expected captions.csv, Clotho "
                                   "clotho_captions_<split>.csv, AudioCaps <split>.csv or a WavCaps .json)")
            return report
        report.layout = layout
        base = root if root.is_dir() else root.parent
        rows = [{"path": _rel(it.path, base), "split": it.split or ""} for it in items]
        report.counts.update(clips=len(items), captions=sum(len(it.captions) for it in items),
                             splits=_splits(rows))
        paths = _listed_paths(rows, base, layout, report)
    splits = report.counts["splits"]
    if not any(s in splits for s in ("train", "(none)")):
        report.problems.append("no clips in split 'train' (the trainer trains on split 'train')")
    if "val" not in splits:
        report.warnings.append("no 'val' split: training runs without a validation metric (mAP@10)")
    good = yield from _check_audio(paths, root if root.is_dir() else root.parent, max_checked, report)
    report.ok = bool(paths) and good > 0 and any(s in splits for s in ("train", "(none)"))
    return report


def _caption_items(root: Path, caption_data: Any) -> tuple[list[Any], str]:  # noqa: ANN401 - a module
    """Clotho, AudioCaps or WavCaps through the loaders of training/caption_data.py."""
    if root.is_file():
        if root.suffix == ".json":
            return caption_data.read_wavcaps(root), "WavCaps JSON"
        if root.suffix == ".csv":
            return caption_data.read_audiocaps(root)[0], "AudioCaps CSV"
        raise ValueError("not a caption data set (a folder, an AudioCaps .csv or a WavCaps .json)")
    items: list[Any] = []
    clotho = sorted(root.glob("clotho_captions_*.csv"))
    if clotho:
        for f in clotho:
            items += caption_data.read_clotho(root, f.stem.removeprefix("clotho_captions_"))
        return items, "Clotho"
    audiocaps = [root / f"{s}.csv" for s in ("train", "val", "test") if (root / f"{s}.csv").is_file()]
    if audiocaps:
        for f in audiocaps:
            items += caption_data.read_audiocaps(f, f.stem)[0]
        return items, "AudioCaps"
    wavcaps = sorted(root.glob("*.json"))
    if wavcaps:
        for f in wavcaps:
            items += caption_data.read_wavcaps(f)
        return items, "WavCaps"
    raise ValueError("no captions.csv (columns path,caption[,caption_2...][,split]), Clotho, AudioCaps or "
                     "WavCaps files found")
