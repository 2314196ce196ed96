"""Search service (no Qt): a retrieval model as the library's `Embedder`, and a session tying it to a library.

`RetrievalEmbedder` wraps a loaded `RetrievalModel` and the front end stored in its checkpoint (PaSST log-mel
at 32 kHz). The library cuts files into `window_seconds` windows and zero-pads the last one; the embedder
gives each window exactly the embedding the model gives that audio as a clip of its own: the zero-padded
tail is cut off before the log-mel (as training computes one log-mel per clip), so a 2-s sound is embedded
as 2 s of audio, not as 2 s + 8 s of silence.

`SearchSession` = one open `Library` + one embedder: indexing job, text search, audio-to-audio search,
per-window scores for "where in a long file", failed files, folders. `preview_job` decodes a file for the
waveform/spectrogram preview. Everything slow is offered as a job (see `app.services.jobs`) for the GUI's
workers and the CLI's tqdm bar.

torch is imported lazily so that the GUI can import this module without paying for torch at start-up.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.services.audio import decode, display_name
from app.services.jobs import Job
from app.services.library import (
    FailedFile,
    Hit,
    IndexReport,
    Library,
    LibraryStats,
    SearchFilters,
    index_library,
)
from training.ranking import require_finite

if TYPE_CHECKING:
    import torch

    from app.services.registry import ModelRegistry
    from app.services.text_tower import TextTower
    from app.services.vector_index import IndexConfig

KIND = "retrieval"
TEXT_CACHE_SIZE = 256  # search-as-you-type asks for the same prefixes again and again
PREVIEW_MAX_SECONDS = 600.0  # longer files are previewed (and played) as a 10-min excerpt
PREVIEW_FRAMES = 2000  # spectrogram columns at most, whatever the file length


class ModelNotFoundError(LookupError):
    """No retrieval model by that name or path, or none installed at all."""


# ------------------------------------------------------------------------------------------- threads


def search_threads() -> int:
    """Threads for model and FAISS work: all cores but one, which stays with the GUI and the audio callback."""
    return max(1, (os.cpu_count() or 2) - 1)


def cap_threads(threads: int | None = None) -> int:
    """Lower torch's and FAISS's thread counts to `threads` (never raise a lower cap set by the user)."""
    import faiss
    import torch

    n = max(1, int(threads or search_threads()))
    n = min(n, torch.get_num_threads())
    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)
    return n


# ------------------------------------------------------------------------------------------- embedder


def file_digest(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


class RetrievalEmbedder:
    """A loaded retrieval model + the front end its audio tower reads (PaSST: 32-kHz PasstMel; aiSFX: 44.1-kHz
    AisfxMel), with the attributes the library's `Embedder` needs."""

    def __init__(self, model: torch.nn.Module, frontend: torch.nn.Module | None = None, name: str = KIND,
                 model_id: str | None = None, batch_size: int = 8) -> None:
        from models.frontends import AisfxMel, PasstMel
        from models.retrieval import audio_frontend

        self.model = model.eval()
        self.name = name
        self.device = next(model.parameters()).device
        cfg = model.config
        self.aisfx = getattr(cfg, "audio_tower", "passt") == "aisfx"
        self.frontend = (frontend if frontend is not None else audio_frontend(cfg)).to(self.device).eval()
        want = AisfxMel if self.aisfx else PasstMel
        if not isinstance(self.frontend, want):
            raise ValueError(f"{name}: a retrieval model with the {'aiSFX' if self.aisfx else 'PaSST'} audio tower "
                             f"needs the {want.__name__} front end, got {type(self.frontend).__name__}")
        if not self.aisfx and self.frontend.dim != cfg.audio.n_mels:
            raise ValueError(f"{name}: front end gives {self.frontend.dim} mel bins, the model expects "
                             f"{cfg.audio.n_mels}")
        self.model_id = model_id or name
        self.backend = "torch"
        if self.aisfx:  # the frozen aiSFX trunk through its fastest runner (training/aisfx_runtime.py)
            from training.aisfx_runtime import accelerate

            self.backend = accelerate(model.audio_encoder)
        self.sample_rate = int(self.frontend.config.sample_rate)
        self.dim = int(cfg.embed_dim)
        self.window_seconds = float(cfg.audio.window_seconds)
        self.batch_size = batch_size
        self._text_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # one forward pass at a time (indexing and searching share the model)

    # -- construction

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], name: str | None = None, device: str = "cpu"
                        ) -> RetrievalEmbedder:
        from training.checkpoints import load_model

        path = Path(path)
        model, ckpt = load_model(path, kind=KIND, device=device)
        name = name or path.stem
        return cls(model, _frontend(ckpt.features), name=name, model_id=model_id_for(name, path))

    @classmethod
    def from_registry(cls, registry: ModelRegistry, name: str) -> RetrievalEmbedder:
        from training.checkpoints import read_metadata

        entry = registry.get(name)
        if entry.kind != KIND:
            raise ValueError(f"{name} is a {entry.kind!r} model, not a retrieval model")
        model = registry.load(name)
        features = read_metadata(entry.path)["features"]
        return cls(model, _frontend(features), name=name, model_id=model_id_for(name, entry.path))

    # -- the Embedder protocol

    @property
    def window_samples(self) -> int:
        return round(self.window_seconds * self.sample_rate)

    def embed_windows(self, audio_windows: np.ndarray) -> np.ndarray:
        """(W, S) float32 windows (the last of a file zero-padded) -> (W, dim) unit vectors.

        Each window's real length is where its trailing zeros start; windows of one length are embedded
        together in batches of `batch_size`, each as a clip of its own (PaSST: time embedding cropped; aiSFX:
        its 100-frame blocks of the window's real frames).
        """
        import torch

        x = np.asarray(audio_windows, dtype=np.float32)
        if x.ndim != 2:
            raise ValueError(f"expected (windows, samples), got shape {x.shape}")
        W, S = x.shape
        lengths = real_lengths(x, minimum=self.frontend.config.n_fft // 2 + 2)  # (W,)
        out = np.zeros((W, self.dim), dtype=np.float32)
        groups: dict[int, list[int]] = {}
        for i, n in enumerate(lengths.tolist()):
            groups.setdefault(n, []).append(i)
        with self._lock, torch.inference_mode():
            for n, rows in groups.items():
                for j in range(0, len(rows), self.batch_size):
                    part = rows[j : j + self.batch_size]
                    wave = torch.from_numpy(_padded(x[part], n)).to(self.device)  # (b, n)
                    out[part] = self._embed_wave(wave).float().cpu().numpy()  # (b, dim)
        require_finite(out, f"{self.name}: audio embeddings")  # a broken model is refused, never indexed
        return out

    def _embed_wave(self, wave: torch.Tensor) -> torch.Tensor:
        """(b, n) real samples (no padding) -> (b, dim)."""
        feats = self.frontend(wave)  # PaSST: (b, n_mels, T); aiSFX: (b, T, 96)
        if not self.aisfx:
            feats = feats[..., : self.model.config.audio.window_frames]  # one window, never two
        return self.model.embed_audio(feats)

    def embed_text(self, texts: list[str]) -> np.ndarray:
        """N texts -> (N, dim) unit vectors; recent queries come from a small cache."""
        import torch

        missing = [t for t in dict.fromkeys(texts) if t not in self._text_cache]
        if missing:
            with self._lock, torch.inference_mode():
                vecs = self.model.embed_text(missing).float().cpu().numpy()  # (M, dim)
            require_finite(vecs, f"{self.name}: text embeddings")
            for t, v in zip(missing, vecs, strict=True):
                self._text_cache[t] = v
        for t in texts:
            self._text_cache.move_to_end(t)
        while len(self._text_cache) > TEXT_CACHE_SIZE:
            self._text_cache.popitem(last=False)
        return np.stack([self._text_cache[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def model_id_for(name: str, path: str | os.PathLike[str]) -> str:
    """Checkpoint name + a short hash of its bytes: retrained weights under the same name get a new index."""
    return f"{name}-{file_digest(path)[:12]}"


def real_lengths(windows: np.ndarray, minimum: int = 1) -> np.ndarray:
    """Samples before each window's trailing zeros (its real audio); an all-zero window counts as full. (W,)"""
    nonzero = windows != 0  # (W, S)
    last = windows.shape[1] - np.argmax(nonzero[:, ::-1], axis=1)  # index after the last non-zero sample
    last = np.where(nonzero.any(axis=1), last, windows.shape[1])
    return np.clip(last, min(minimum, windows.shape[1]), windows.shape[1]).astype(np.int64)


def _padded(x: np.ndarray, n: int) -> np.ndarray:
    """The first n samples of each row, zero-padded when a row is shorter (only for very short windows)."""
    if x.shape[1] >= n:
        return np.ascontiguousarray(x[:, :n])
    return np.pad(x, ((0, 0), (0, n - x.shape[1])))


def _frontend(features: dict[str, Any]) -> torch.nn.Module | None:
    """The checkpoint's front end; None (the tower's default) for checkpoints that did not record one."""
    from models.frontends import frontend_from_dict

    return frontend_from_dict(features) if features else None


def resolve_model(spec: str | None = None, registry: ModelRegistry | None = None) -> tuple[str, Path]:
    """(name, checkpoint path) from a registry name, a path to a .safetensors file, or the default model."""
    from app.services.registry import ModelRegistry

    if spec and (spec.endswith(".safetensors") or os.sep in spec or "/" in spec):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ModelNotFoundError(f"{display_name(path)}: no such checkpoint file")
        return path.stem, path
    registry = registry or ModelRegistry()
    if not registry.entries():
        registry.scan()
    if spec:
        try:
            entry = registry.get(spec)
        except KeyError as e:
            raise ModelNotFoundError(str(e).strip("'\"")) from None
        if entry.kind != KIND:
            raise ModelNotFoundError(f"{spec} is a {entry.kind} model, not a retrieval model")
        return entry.name, entry.path
    entry = registry.default_for(KIND)
    if entry is None:
        raise ModelNotFoundError("no retrieval model installed: train one (`earshot train retrieval` or the Train "
                                 "tab), or pass --model PATH.safetensors")
    return entry.name, entry.path


def load_embedder(spec: str | None = None, registry: ModelRegistry | None = None, device: str = "cpu"
                  ) -> RetrievalEmbedder:
    name, path = resolve_model(spec, registry)
    return RetrievalEmbedder.from_checkpoint(path, name=name, device=device)


def load_query_embedder(spec: str | None = None, registry: ModelRegistry | None = None
                        ) -> RetrievalEmbedder | TextTower:
    """What text queries need and nothing more: the checkpoint's text tower run in NumPy when it is a plain
    BERT (no torch import, so `earshot search` starts in a fraction of the time), else the whole model."""
    from app.services.text_tower import load_text_tower

    name, path = resolve_model(spec, registry)
    tower = load_text_tower(path, name, model_id_for(name, path))
    return tower if tower is not None else RetrievalEmbedder.from_checkpoint(path, name=name)


def load_embedder_job(registry: ModelRegistry | None, name: str) -> Job[RetrievalEmbedder]:
    """Load a retrieval model through the registry (cached on its device), or from a path without one."""
    yield {"message": f"loading {name}…"}
    cap_threads()
    if registry is not None:
        return RetrievalEmbedder.from_registry(registry, name)
    return load_embedder(name)


# -------------------------------------------------------------------------------------------- session


@dataclass
class WindowScores:
    """Similarity of each window of a file to a query: where in a long file the match is."""

    starts: np.ndarray  # (W,) seconds where each window starts
    scores: np.ndarray  # (W,) cosine similarity
    window_seconds: float

    @property
    def best_start(self) -> float:
        return float(self.starts[int(np.argmax(self.scores))]) if len(self.scores) else 0.0


class SearchSession:
    """An open library and the retrieval model whose index it searches."""

    def __init__(self, library: Library, embedder: RetrievalEmbedder) -> None:
        self.library = library
        self.embedder = embedder

    @classmethod
    def open(cls, path: str | os.PathLike[str], embedder: RetrievalEmbedder,
             index_config: IndexConfig | None = None) -> SearchSession:
        return cls(Library.open(path, index_config), embedder)

    def close(self) -> None:
        self.library.close()

    @property
    def root(self) -> Path:
        return self.library.root

    @property
    def closed(self) -> bool:
        return self.library.db is None

    # -- indexing

    def index_job(self, workers: int | None = None, **kwargs: Any) -> Job[IndexReport]:
        """The library's incremental indexing job, with threads capped so that a core stays free."""
        cap_threads()
        readers = workers or (1 if (os.cpu_count() or 2) <= 2 else 2)
        return index_library(self.library, self.embedder, workers=readers, **kwargs)

    # -- searching

    def search(self, text: str, k: int = 10, filters: SearchFilters | None = None) -> list[Hit]:
        text = text.strip()
        if not text:
            return []
        # embedded first, even with nothing indexed: a broken (NaN/Inf) model is reported, not "no results";
        # the library's own call then hits the embedder's cache
        self.embedder.embed_text([text])
        k = self.capped_k(k)
        return self.library.search_text(text, self.embedder, k, filters) if k else []

    def similar(self, path_or_file_id: str | os.PathLike[str] | int, k: int = 10,
                filters: SearchFilters | None = None) -> list[Hit]:
        k = self.capped_k(k)
        if k == 0:
            return []
        return self.library.similar(path_or_file_id, self.embedder, k, filters)

    def capped_k(self, k: int) -> int:
        """k validated (a whole number >= 1) and capped at the number of indexed files: asking for a billion
        results must not allocate a billion result slots."""
        k = check_k(k)
        lib = self.library
        with lib.lock:  # one count, not the whole catalog's stats: this runs on every search-as-you-type
            (n,) = lib.db.execute("SELECT count(*) FROM vectors WHERE model_id = ?",
                                  (self.embedder.model_id,)).fetchone()
        return min(k, int(n))

    def window_scores(self, hit: Hit, query: str | np.ndarray | None = None) -> WindowScores:
        """Per-window similarity of a hit's file: to the query it was found by (None), a text or a vector."""
        step = self.embedder.window_seconds
        if query is None:
            scores = np.asarray(hit.window_scores, dtype=np.float32)
        else:
            q = self.embedder.embed_text([query])[0] if isinstance(query, str) else np.asarray(query, np.float32)
            q = q / max(float(np.linalg.norm(q)), 1e-12)  # (D,)
            scores = self._windows(hit.file_id) @ q  # (W,)
        return WindowScores(np.arange(len(scores), dtype=np.float32) * step, scores, step)

    def _windows(self, file_id: int) -> np.ndarray:
        lib = self.library
        with lib.lock:
            row = lib.db.execute("SELECT windows FROM vectors WHERE file_id = ? AND model_id = ?",
                                 (file_id, self.embedder.model_id)).fetchone()
        if row is None:
            return np.zeros((0, self.embedder.dim), np.float32)
        return np.frombuffer(row[0], dtype=np.float32).reshape(-1, self.embedder.dim)  # (W, D)

    # -- catalog views

    def failed_files(self) -> list[FailedFile]:
        return self.library.failed_files()

    def stats(self) -> LibraryStats:
        return self.library.stats()

    def indexed_count(self) -> int:
        return int(self.stats().vectors.get(self.embedder.model_id, 0))

    def folders(self) -> list[str]:
        """Relative folders holding catalogued sounds (and their parents), sorted; '' (the root) excluded."""
        lib = self.library
        with lib.lock:
            rows = lib.db.execute("SELECT path FROM files WHERE status = 'ok'").fetchall()
        found: set[str] = set()
        for (p,) in rows:
            parts = os.fsdecode(bytes(p)).split("/")[:-1]
            for i in range(1, len(parts) + 1):
                found.add("/".join(parts[:i]))
        return sorted(found)


# -------------------------------------------------------------------------------------------- preview


@dataclass
class Preview:
    """What the Search tab draws and plays for one file."""

    path: Path
    audio: np.ndarray  # (N,) float32 mono
    sample_rate: int
    offset_s: float  # where `audio` starts in the file (long files are previewed as an excerpt)
    duration_s: float  # of the whole file
    spectrogram: np.ndarray  # (T, F) dB
    hop_seconds: float
    max_hz: float  # top of the spectrogram's frequency axis

    @property
    def end_s(self) -> float:
        return self.offset_s + len(self.audio) / self.sample_rate


def spectrogram_db(audio: np.ndarray, sample_rate: int, n_fft: int = 512, max_frames: int = PREVIEW_FRAMES
                   ) -> tuple[np.ndarray, float]:
    """Log-power STFT (T, n_fft // 2 + 1) in dB, hop chosen so that T <= max_frames; returns (frames, hop_s)."""
    x = np.asarray(audio, dtype=np.float32)
    if len(x) < n_fft:
        x = np.pad(x, (0, n_fft - len(x)))
    hop = max(n_fft // 4, -(-(len(x) - n_fft) // max(max_frames - 1, 1)))
    starts = np.arange(0, len(x) - n_fft + 1, hop)
    frames = np.stack([x[s : s + n_fft] for s in starts]) * np.hanning(n_fft).astype(np.float32)  # (T, n_fft)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # (T, F)
    db = 10 * np.log10(power + 1e-10)
    return np.maximum(db, db.max() - 80.0).astype(np.float32), hop / sample_rate


def load_preview(path: str | os.PathLike[str], around_s: float = 0.0, max_seconds: float = PREVIEW_MAX_SECONDS
                 ) -> Preview:
    """Decode a file (mono, its own rate) and its spectrogram; a long one as an excerpt around `around_s`."""
    from app.services.audio import audio_info

    info = audio_info(path)
    offset = 0.0
    if info.duration > max_seconds:
        offset = min(max(0.0, around_s - 0.1 * max_seconds), info.duration - max_seconds)
    d = decode(path, start=offset, duration=min(info.duration, max_seconds), max_seconds=None)
    spec, hop = spectrogram_db(d.audio, d.sample_rate)
    return Preview(Path(path), d.audio, d.sample_rate, offset, info.duration, spec, hop, d.sample_rate / 2)


def preview_job(path: str | os.PathLike[str], around_s: float = 0.0) -> Job[Preview]:
    yield {"message": f"opening {display_name(Path(path).name)}"}
    return load_preview(path, around_s)


# ---------------------------------------------------------------------------------------------- jobs


def open_session_job(path: str | os.PathLike[str], embedder: RetrievalEmbedder) -> Job[SearchSession]:
    yield {"message": f"opening library {display_name(path)}"}
    return SearchSession.open(path, embedder)


@dataclass
class Results:
    """One search's answer for the GUI: hits, and what an empty list means."""

    hits: list[Hit]
    query: str  # the text, or the display name of the file for "similar"
    mode: str  # "text" | "similar"
    indexed: int  # vectors in the index when it ran (0: nothing indexed yet)
    filtered: bool = False


def search_job(session: SearchSession, text: str, k: int, filters: SearchFilters | None) -> Job[Results]:
    yield {"message": f"searching for “{text}”"}
    hits = session.search(text, k, filters)
    return Results(hits, text, "text", session.indexed_count(), bool(filters and filters.active))


def similar_job(session: SearchSession, path: str | os.PathLike[str], k: int,
                filters: SearchFilters | None) -> Job[Results]:
    yield {"message": f"finding sounds like {display_name(Path(path).name)}"}
    hits = session.similar(path, k, filters)
    return Results(hits, display_name(Path(path).name), "similar", session.indexed_count(),
                   bool(filters and filters.active))


@dataclass
class IndexOutcome:
    report: IndexReport
    failed: list[FailedFile]  # every failed file in the catalog, not only this run's
    folders: list[str]
    indexed: int


def index_session_job(session: SearchSession, **kwargs: Any) -> Job[IndexOutcome]:
    """Index, then gather what the Search tab shows about the catalog (all off the GUI thread)."""
    report = yield from session.index_job(**kwargs)
    return IndexOutcome(report, session.failed_files(), session.folders(), session.indexed_count())


def catalog_job(session: SearchSession) -> Job[tuple[list[FailedFile], list[str], int]]:
    yield {"message": "reading the catalog"}
    return session.failed_files(), session.folders(), session.indexed_count()


def summarize(report: IndexReport) -> dict[str, Any]:
    """An IndexReport as numbers for the CLI and the status line (throughput in × real time)."""
    elapsed = max(report.elapsed_s, 1e-9)
    return {
        "model": report.model_id,
        "files": report.files_seen,
        "unchanged": report.unchanged,
        "embedded": len(report.embedded),
        "moved": len(report.moved),
        "copied": len(report.copied),
        "removed": report.removed,
        "failed": len(report.failed),
        "windows": report.windows,
        "audio_seconds": round(report.audio_seconds, 3),
        "elapsed_s": round(report.elapsed_s, 3),
        "x_realtime": round(report.audio_seconds / elapsed, 2) if report.audio_seconds else 0.0,
        "failures": [{"path": f.path, "error": f.error} for f in report.failed],
        "scan_errors": list(report.scan_errors),
    }


def check_k(k: int) -> int:
    """The number of results asked for, refused with a clear message unless it is a whole number >= 1."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"the number of results (-k) must be a whole number of at least 1, got {k!r}")
    return int(k)


def path_fields(path: str | os.PathLike[str], key: str = "path") -> dict[str, str]:
    """A path for JSON: {key: text}, plus {key + "_bytes": base64 of the exact bytes} when the name is not
    valid UTF-8. The text is then only for display (undecodable bytes become U+FFFD); open the bytes."""
    raw = os.fsencode(path)
    try:
        return {key: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {key: raw.decode("utf-8", "replace"), f"{key}_bytes": base64.b64encode(raw).decode("ascii")}


def hit_dict(hit: Hit) -> dict[str, Any]:
    """A hit as JSON-safe values: every string is valid Unicode (see `path_fields` for odd file names)."""
    return {**path_fields(hit.path), "name": hit.name, "folder": display_name(hit.folder),
            "score": round(hit.score, 5), "duration": round(hit.duration, 3),
            "best_window_start_s": hit.best_window_start_s, "window_scores": [round(s, 5) for s in hit.window_scores]}
