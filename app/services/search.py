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
import functools
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
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
    MatchInfo,
    SearchFilters,
    index_library,
    names,
)
from app.services.library.textchannel import embed_sentences, sentence
from app.services.query import Query, parse
from app.services.text_tower import TextTower as TextTowerType
from core.finite import require_finite

if TYPE_CHECKING:
    import torch

    from app.services.registry import ModelRegistry
    from app.services.text_tower import SentenceEncoder, TextTower
    from app.services.vector_index import IndexConfig

KIND = "retrieval"
TEXT_CACHE_SIZE = 256  # search-as-you-type asks for the same prefixes again and again
PREVIEW_MAX_SECONDS = 600.0  # longer files are previewed (and played) as a 10-min excerpt
PREVIEW_FRAMES = 2000  # spectrogram columns at most, whatever the file length


# ------------------------------------------------------------------------------------- fusion settings
# The rule: a weighted sum of the two channels' scores over their candidates,
#   fused = w * names + (1 - w) * sound cosine
# Names score: KEYWORD_SHARE * BM25 relative to the query's best keyword match + the rest * the MiniLM cosine
# mapped from [SEM_FLOOR, SEM_CEIL] to [0, 1] -- absolute, so a strong, specific name match (0.9-1.0) keeps its
# lead over files that only sound right, while names that say little (0.2-0.4 for the best file) leave sound the
# say among them. A file whose names score is 0 (no keyword match, cosine below the floor: hash-like names, no
# tags) gets no names term, so a library whose names say nothing ranks exactly like sound. Sound: the raw audio
# cosine, not rescaled per query (a file without a sound vector counts as the lowest candidate).
# Chosen by 5-fold cross-validation over the 80 development queries (`python -m bench search_quality`, README
# "Search quality"), the names score's constants held fixed (they define names-only search): this sum with
# w = 0.7 was chosen on every training fold over the sum with min-max-scaled sound and reciprocal-rank fusion,
# and is never worse than names-only on any held-out query there (the default aiSFX sound channel; the best w
# depends on the sound channel: 0.85 for the earlier PaSST one). The earlier RRF (w = 0.7, k = 5) ranked a file that
# sounds right above the only file whose name says exactly what was asked ("creaky door" -> a fence gate,
# before "DoorCreak"): rank fusion throws the names' score gaps away.
SEARCH_MODES = ("names", "sound", "both")
NAMES_WEIGHT = 0.7  # the names' share of the fused score by default (the GUI slider and --names-weight override it)
KEYWORD_SHARE = 0.2  # BM25's share of the names score; the rest is the semantic (MiniLM) similarity
SEM_FLOOR, SEM_CEIL = 0.2, 0.6  # MiniLM cosines below the floor say nothing; at the ceiling the names agree fully
FUSION = "sum"  # "sum" (the rule above), or "rrf": reciprocal-rank fusion, kept to compare (bench/search_quality.py)
SOUND_SCALE = "cosine"  # the sum's sound score: "cosine" (raw) or "minmax" (rescaled over the candidates), to compare
RRF_K = 5.0  # reciprocal-rank fusion's constant: small, so the top ranks of each channel count most
CANDIDATES = 100  # each channel's candidates per query (at least k): the fusion ranks their union exactly
COMMON_SHARE, COMMON_MIN = 0.005, 2000  # a keyword matching more files than both is left out of the BM25 ranking
NAMES_MIN = 0.1  # names mode lists files with a keyword match or a names score above this (costs nothing on the
# benchmark's names-only mAP@10 and R@10, and halves the list: cosines just above the floor are mostly noise)
_UNSET = object()


class ModelNotFoundError(LookupError):
    """No retrieval model by that name or path, or none installed at all."""


# ------------------------------------------------------------------------------------------- threads


def search_threads() -> int:
    """Threads for model and FAISS work: all cores but one, which stays with the GUI and the audio callback."""
    return max(1, (os.cpu_count() or 2) - 1)


def trunk_threads() -> int:
    """Threads for the aiSFX tower on the CPU: every core (RetrievalEmbedder runs that many batches at once, each
    ONNX Runtime session single-threaded). Indexing is nearly all tower, and those sessions never spin
    (training/aisfx_runtime.session_from_bytes): the threads sleep between batches, so the GUI thread, which
    needs a few milliseconds at a time, still gets a core when it wakes (tests/gui/test_search_tab.py). Override
    with EARSHOT_TRUNK_THREADS."""
    env = os.environ.get("EARSHOT_TRUNK_THREADS", "")
    return max(1, int(env)) if env.isdigit() else max(1, os.cpu_count() or 1)


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


@dataclass
class PreparedWindows:
    """A batch of windows after the front end (RetrievalEmbedder.prepare_windows): groups of (rows, frames
    (b, ...), real frame counts (b,) or None), rows indexing the batch's windows in order."""

    count: int
    groups: list[tuple[np.ndarray, Any, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return self.count


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
        self.workers, self.backend = 1, "torch"  # batches of the tower run at once; its runner
        if self.aisfx:
            self.set_backend()
        self.sample_rate = int(self.frontend.config.sample_rate)
        self.dim = int(cfg.embed_dim)
        self.window_seconds = float(cfg.audio.window_seconds)
        self.batch_size = batch_size
        self._text_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # one forward pass at a time (indexing and searching share the model)

    def set_backend(self, backend: str | None = None) -> str:
        """Run the frozen aiSFX tower through `backend` (training/aisfx_runtime.accelerate; default "auto": int8,
        then float ONNX Runtime, then torch) and return the one used. On the CPU its ONNX Runtime sessions run
        single-threaded, `trunk_threads()` batches at once: ~5 % faster than one batch at a time on every core
        (no hand-offs inside each small convolution). A torch tower (PaSST, the torch fallback) runs one batch at
        a time on torch's own threads."""
        from core.aisfx_runtime import accelerate

        parallel = self.device.type == "cpu" and backend != "torch" and trunk_threads() > 1
        self.backend = accelerate(self.model.audio_encoder, backend, threads=1 if parallel else trunk_threads())
        self.workers = trunk_threads() if parallel and self.backend != "torch" else 1
        return self.backend

    # -- construction

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], name: str | None = None, device: str = "cpu"
                        ) -> RetrievalEmbedder:
        from core.checkpoints import load_model

        path = Path(path)
        model, ckpt = load_model(path, kind=KIND, device=device)
        name = name or path.stem
        return cls(model, _frontend(ckpt.features), name=name, model_id=model_id_for(name, path))

    @classmethod
    def from_registry(cls, registry: ModelRegistry, name: str) -> RetrievalEmbedder:
        from core.checkpoints import read_metadata

        entry = registry.get(name)
        if entry.kind != KIND:
            raise ValueError(f"{name} is a {entry.kind!r} model, not a retrieval model")
        model = registry.load(name)
        features = read_metadata(entry.path)["features"]
        return cls(model, _frontend(features), name=name, model_id=model_id_for(name, entry.path))

    def warm_up(self) -> None:
        """Build the audio tower's inference runner now, as part of loading the model, not on the first file
        indexed: the ONNX export and, the first time for these weights, the int8 calibration (a few seconds;
        cached in the user's cache folder after that)."""
        if not self.aisfx:
            return
        import torch

        block = self.model.audio_encoder.config.block_frames
        with self._lock, torch.inference_mode():
            self.model.audio_encoder(torch.zeros(1, block, self.frontend.dim, device=self.device))

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
        return self.embed_prepared([self.prepare_windows(audio_windows)])

    def prepare_windows(self, audio_windows: np.ndarray) -> PreparedWindows:
        """(W, S) windows -> their front-end frames, ready for `embed_prepared`. Thread-safe and lock-free: the
        indexer runs it in its reader threads, so the front end overlaps the tower's runs on other files."""
        import torch

        x = np.asarray(audio_windows, dtype=np.float32)
        if x.ndim != 2:
            raise ValueError(f"expected (windows, samples), got shape {x.shape}")
        lengths = real_lengths(x, minimum=self.frontend.config.n_fft // 2 + 2)  # (W,)
        groups: dict[int, list[int]] = {}
        for i, n in enumerate(lengths.tolist()):
            groups.setdefault(self._group(n), []).append(i)
        prepared = PreparedWindows(len(x))
        with torch.inference_mode():
            for n, rows in groups.items():
                wave = torch.from_numpy(_padded(x[rows], n)).to(self.device)  # (b, n)
                real = torch.from_numpy(np.minimum(lengths[rows], n)).to(self.device)  # (b,)
                if self.aisfx:  # (b, T, 96), each row peak-normalised over its real samples; (b,) real frames
                    feats, frames = self.frontend(wave, real), self.frontend.num_frames(real)
                else:  # PaSST groups are of one real length, n: one window, never two
                    feats, frames = self.frontend(wave)[..., : self.model.config.audio.window_frames], None
                prepared.groups.append((np.asarray(rows), feats, frames))
        return prepared

    def embed_prepared(self, batches: Sequence[PreparedWindows]) -> np.ndarray:
        """Prepared windows (of one or several files) -> (sum of their windows, dim) unit vectors, in order.
        Frames of one shape are embedded together, across files, in batches of `batch_size`."""
        import torch

        out = np.zeros((sum(len(b) for b in batches), self.dim), dtype=np.float32)
        by_shape: dict[tuple[int, ...], list[tuple[np.ndarray, torch.Tensor, torch.Tensor | None]]] = {}
        start = 0
        for b in batches:
            for rows, feats, frames in b.groups:
                by_shape.setdefault(tuple(feats.shape[1:]), []).append((rows + start, feats, frames))
            start += len(b)
        tasks: list[tuple[np.ndarray, torch.Tensor, torch.Tensor | None]] = []  # (rows, frames, real counts)
        for parts in by_shape.values():
            rows = np.concatenate([r for r, _, _ in parts])
            feats = torch.cat([f for _, f, _ in parts])  # (b, ...)
            frames = None if parts[0][2] is None else torch.cat([n for _, _, n in parts])  # (b,)
            step = max(1, min(self.batch_size, -(-len(rows) // self.workers)))  # every worker gets a share
            tasks += [(rows[j : j + step], feats[j : j + step], None if frames is None else frames[j : j + step])
                      for j in range(0, len(rows), step)]
        with self._lock:
            if self.workers > 1 and len(tasks) > 1:  # threads of this call only: none outlive it
                with ThreadPoolExecutor(min(self.workers, len(tasks)), thread_name_prefix="earshot-tower") as pool:
                    done = list(pool.map(self._embed_frames, tasks))
            else:
                done = [self._embed_frames(t) for t in tasks]
            for (rows, _, _), vecs in zip(tasks, done, strict=True):
                out[rows] = vecs
        require_finite(out, f"{self.name}: audio embeddings")  # a broken model is refused, never indexed
        return out

    def _embed_frames(self, task: tuple[np.ndarray, torch.Tensor, torch.Tensor | None]) -> np.ndarray:
        """One batch of front-end frames (+ real frame counts) -> (b, dim); runs on a worker thread."""
        import torch

        _, feats, frames = task
        with torch.inference_mode():
            return self.model.embed_audio(feats, frames).float().cpu().numpy()

    def _group(self, n: int) -> int:
        """Windows embedded together: those of one real length; for aiSFX also every window shorter than one
        100-frame block (the tower pads each to a block, so they make one batch: ~2x fewer, fuller trunk runs
        on a library of short one-shots). Returns the samples each group's batch is cut or padded to."""
        if not self.aisfx:
            return n
        block = self.model.audio_encoder.config.block_frames
        short = (block - 1) * self.frontend.config.hop_length  # n samples give n // hop + 1 frames
        return max(n, short)

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
    embedder = RetrievalEmbedder.from_checkpoint(path, name=name, device=device)
    embedder.warm_up()
    sentence_encoder_for(embedder)  # the names' encoder too: the first index or search does not wait for it
    return embedder


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
    if registry is None:
        return load_embedder(name)
    embedder = RetrievalEmbedder.from_registry(registry, name)
    yield {"message": f"preparing {name}…"}
    embedder.warm_up()
    sentence_encoder_for(embedder)  # the names' encoder too: the first index or search does not wait for it
    return embedder


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

    def __init__(self, library: Library, embedder: RetrievalEmbedder,
                 text_encoder: SentenceEncoder | None | object = _UNSET) -> None:
        self.library = library
        self.embedder = embedder
        self._text_encoder = text_encoder  # _UNSET: the default MiniLM, loaded on first use

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
        return index_library(self.library, self.embedder, workers=readers, text_encoder=self.text_encoder, **kwargs)

    # -- searching

    def search(self, text: str, k: int = 10, filters: SearchFilters | None = None, mode: str = "both",
               names_weight: float | None = None) -> list[Hit]:
        """The k files that best match a query, by what they are called and tagged (`names`), by what they sound
        like (`sound`), or both fused (`both`, the default; `names_weight` in [0, 1] overrides the tuned weight
        of the names). Query syntax: `-word` excludes (in every mode), `"exact phrase"`, `word*` prefix."""
        check_mode(mode)
        w = fusion_weight(mode, names_weight)
        query = parse(text)
        if query.empty:
            return []
        k = self.capped_k(k)
        # the keywords are ranked (SQLite FTS5, on its own connection) on one core while the query is encoded on
        # the other: the slowest part of a names search no longer adds up. Leaving the block joins the thread.
        keywords: Future | None = None
        with ThreadPoolExecutor(1, thread_name_prefix="earshot-keywords") as pool:
            if k and w > 0:
                keywords = pool.submit(self._keyword_candidates, query, max(k, CANDIDATES))
            # embedded first, even with nothing indexed: a broken (NaN/Inf) model is reported, not "no results"
            sound_q, text_q = self._encode_query(query.free_text, w)
        found = keywords.result() if keywords is not None else None
        return self._ranked(query, k, filters, w, mode, sound_q, text_q, found) if k else []

    def _keyword_candidates(self, query: Query, n: int, matches: bool = True
                            ) -> tuple[set[int], list[tuple[int, float]]]:
        """The files the query excludes, and (unless `matches` is False: sound only) the best keyword matches
        (file id, BM25) beyond them."""
        lib = self.library
        excluded = lib.keyword_files(query.fts_exclude()) if query.excluded else set()
        match = self._keyword_match(query) if matches else None
        return excluded, (lib.keyword_search(match, n + len(excluded)) if match else [])

    def _encode_query(self, text: str, w: float) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The query's sound-space vector (unless names only) and sentence vector (when the library has text
        vectors and the names count). When the retrieval model's text tower is the frozen MiniLM that also
        makes the sentence vectors, one forward pass gives both (half the query-encoding time)."""
        enc = self.text_encoder
        need_text = w > 0 and enc is not None and self.library.indexed_vectors(enc.model_id) > 0
        need_sound = w < 1
        tower = self.embedder
        if need_text and need_sound and isinstance(tower, TextTowerType) and isinstance(enc, TextTowerType) \
                and tower.shares_encoder_with(enc):
            return tower.embed_with_mean(text)
        sound_q = self.embedder.embed_text([text])[0] if need_sound else None
        text_q = enc.embed_text([text])[0] if need_text else None  # type: ignore[union-attr]
        return sound_q, text_q

    def similar(self, path_or_file_id: str | os.PathLike[str] | int, k: int = 10,
                filters: SearchFilters | None = None, names_weight: float | None = None) -> list[Hit]:
        """Files that sound like a file (sound channel); names_weight > 0 adds how alike their names and tags
        are (the MiniLM sentence vectors), fused with the same rule as text search."""
        k = self.capped_k(k)
        if k == 0:
            return []
        if not names_weight:
            return self.library.similar(path_or_file_id, self.embedder, k, filters)
        sound = self.library.similar(path_or_file_id, self.embedder, max(k, CANDIDATES), filters)
        w = fusion_weight("both", names_weight)
        fid = path_or_file_id if isinstance(path_or_file_id, int) else self.library.file_id(path_or_file_id)
        text_q = self._file_sentence_vector(path_or_file_id, fid)
        cands = Candidates(sound={h.file_id: h.score for h in sound})
        enc = self.text_encoder
        if text_q is not None and enc is not None:
            exclude = [fid] if fid is not None else []
            cands.semantic = dict(self.library.nearest_files(text_q, enc.model_id, max(k, CANDIDATES), filters,
                                                             exclude))
            cands.fill_semantic(self.library, enc.model_id, text_q)
        sound_q = None if fid is None else self.library.file_vectors(self.embedder.model_id, [fid]).get(fid)
        if sound_q is not None:
            cands.fill_sound(self.library, self.embedder.model_id, sound_q)
        return self._hits(cands.fused(w), k, sound_q, None, {h.file_id: h for h in sound})

    # -- the two channels and their fusion

    def _ranked(self, query: Query, k: int, filters: SearchFilters | None, w: float, mode: str,
                sound_q: np.ndarray | None, text_q: np.ndarray | None,
                keywords: tuple[set[int], list[tuple[int, float]]] | None = None) -> list[Hit]:
        lib, n = self.library, max(k, CANDIDATES)
        excluded, found = keywords if keywords is not None else self._keyword_candidates(query, n, w > 0)
        if w == 0:  # sound only: today's ranking, minus excluded files
            return self._explain(lib.search_vector(sound_q, self.embedder.model_id, k, filters, sorted(excluded)),
                                 query)
        cands = Candidates()
        if found:
            allowed = lib.allowed_files([f for f, _ in found], filters)
            cands.keyword = {f: s for f, s in found if f in allowed and f not in excluded}
        enc = self.text_encoder
        if text_q is not None and enc is not None:
            cands.semantic = dict(lib.nearest_files(text_q, enc.model_id, n, filters, sorted(excluded)))
        if sound_q is not None:
            cands.sound = dict(lib.nearest_files(sound_q, self.embedder.model_id, n, filters, sorted(excluded)))
            cands.fill_sound(lib, self.embedder.model_id, sound_q)
        if text_q is not None and enc is not None:
            cands.fill_semantic(lib, enc.model_id, text_q)
        ranked = cands.fused(w)
        if mode == "names":
            ranked = [r for r in ranked if r[1].keyword > 0 or r[1].name > NAMES_MIN]
        return self._hits(ranked, k, sound_q, query)

    def _keyword_match(self, query: Query) -> str | None:
        """The query's FTS5 expression without the parts that match a large share of the library (when another
        part is more specific): BM25 is computed for every file a query matches, so one common word ("water" in
        a library with a water folder of 100k files) would cost more than the rest of the search; such a word
        also weighs next to nothing in BM25 (low IDF), and the sentence vectors still read it."""
        parts = query.fts_parts()
        if len(parts) < 2:
            return query.fts_match()
        enc = self.text_encoder
        indexed = max(self.library.indexed_vectors(self.embedder.model_id),  # files in the (in-memory) indexes
                      self.library.indexed_vectors(enc.model_id) if enc is not None else 0)
        cap = max(COMMON_MIN, int(COMMON_SHARE * indexed))
        counts = self.library.keyword_counts(parts, cap)
        keep = [p for p, c in zip(parts, counts, strict=True) if c < cap]
        return " OR ".join(keep or parts)

    def _hits(self, ranked: list[tuple[int, Scores]], k: int, sound_q: np.ndarray | None, query: Query | None,
              known: dict[int, Hit] | None = None) -> list[Hit]:
        top = ranked[:k]
        known = known or {}
        missing = [f for f, _ in top if f not in known]
        hits = {**known, **self.library.hits_for(missing, self.embedder.model_id, sound_q)} if missing else known
        out = []
        for fid, sc in top:
            h = hits.get(fid)
            if h is None:
                continue
            h.score = sc.fused
            h.match = MatchInfo(name_score=sc.name, keyword_score=sc.keyword, semantic_score=sc.semantic_raw,
                                sound_score=sc.sound_raw, sound_norm=sc.sound)
            out.append(h)
        return self._explain(out, query)

    def _explain(self, hits: list[Hit], query: Query | None) -> list[Hit]:
        """Fill in why each hit matched (query words in its name, folder, tags, user tags), its tags and
        favourite mark (three catalog queries for all the hits)."""
        lib = self.library
        ids = [h.file_id for h in hits]
        fields, user, favs = lib.text_fields(ids), lib.user_tags_for(ids), lib.favourite_ids(ids)
        for hit in hits:
            path, tags = fields.get(hit.file_id, (hit.rel_path, ""))
            hit.user_tags = user.get(hit.file_id, [])
            hit.favourite = hit.file_id in favs
            info = hit.match or MatchInfo(sound_score=hit.score)
            folder, _, name = path.rpartition("/")
            info.fields = {"name": name, "folder": folder, "tags": tags, "user_tags": "; ".join(hit.user_tags)}
            if query is not None:
                info.spans, info.matched_terms = highlight(info.fields, query)
            hit.match = info
        return hits

    def _file_sentence_vector(self, path_or_file_id: str | os.PathLike[str] | int, fid: int | None
                              ) -> np.ndarray | None:
        """The text vector of a catalogued file, or of an outside file's name and folder words."""
        enc = self.text_encoder
        if enc is None:
            return None
        if fid is not None:
            return self.library.file_vectors(enc.model_id, [fid]).get(fid)
        p = Path(os.fspath(path_or_file_id))
        text = sentence(" ".join(names.name_words(p.stem)), " ".join(names.folder_words(p.parent.name)), "", [])
        return enc.embed_text([text])[0] if text else None

    # -- the user's tags and favourites (the Search tab's tag editing; `earshot tags`)

    @property
    def tags(self) -> TagEditor:
        return TagEditor(self.library, self.text_encoder)

    def add_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        """Tag files (several at once); only the changed files' sentence vectors are embedded again. Returns the
        files whose tags changed; ValueError for a bad tag, LibraryError for an unknown file id (nothing changed)."""
        return self.tags.add_tags(file_ids, tags)

    def remove_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        return self.tags.remove_tags(file_ids, tags)

    def set_favourite(self, file_ids: Sequence[int], on: bool) -> None:
        self.library.set_favourite(file_ids, on)

    def tags_of(self, file_id: int) -> list[str]:
        return self.library.tags_of(file_id)

    def all_tags(self) -> list[str]:
        return self.library.all_tags()

    @property
    def text_encoder(self) -> SentenceEncoder | None:
        """The MiniLM sentence encoder of the text channel (NumPy), loaded once; None when not installed."""
        if self._text_encoder is _UNSET:
            self._text_encoder = sentence_encoder_for(self.embedder)
        return self._text_encoder  # type: ignore[return-value]

    def capped_k(self, k: int) -> int:
        """k validated (a whole number >= 1) and capped at the number of indexed files: asking for a billion
        results must not allocate a billion result slots."""
        k = check_k(k)
        return min(k, self.library.indexed_vectors(self.embedder.model_id))  # in memory: runs on every keystroke

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


# ------------------------------------------------------------------------------------------ user tags


@dataclass
class TagImport:
    """What `TagEditor.import_csv` did; nothing in the file is silently dropped."""

    rows: int = 0
    files: int = 0  # files whose tags or favourite mark changed
    tags_added: int = 0
    unknown: list[tuple[int, str]] = field(default_factory=list)  # (line, path) not in the library
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line, what is wrong)


TAG_COLUMNS = ("path", "tags", "favourite")
_YES, _NO = {"1", "true", "yes", "y", "x", "*"}, {"0", "false", "no", "n"}


class TagEditor:
    """The user's tags and favourites of a library, with the text channel kept current: a tag change rewrites the
    file's keyword row at once and re-embeds only the changed files' sentences. Needs no retrieval model (the
    `earshot tags` command and the Search tab use it)."""

    def __init__(self, library: Library, text_encoder: SentenceEncoder | None | object = _UNSET) -> None:
        self.library = library
        self.text_encoder = default_text_encoder() if text_encoder is _UNSET else text_encoder

    def add_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        changed = self.library.add_tags(file_ids, tags)
        self.reembed(changed)
        return changed

    def remove_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        changed = self.library.remove_tags(file_ids, tags)
        self.reembed(changed)
        return changed

    def reembed(self, file_ids: Sequence[int]) -> None:
        enc = self.text_encoder
        if enc is None or not file_ids:
            return
        lib = self.library
        lib.register_text_model(enc)  # type: ignore[arg-type]
        pending = lib.pending_text_vectors(enc.model_id, file_ids)  # type: ignore[union-attr]
        items = embed_sentences(enc, pending)  # type: ignore[arg-type]  # one batched pass
        if items:
            lib.store_text_vectors(enc.model_id, items)  # type: ignore[union-attr]
            lib.save_index(enc.model_id)  # type: ignore[union-attr]

    def file_ids(self, paths: Sequence[str | os.PathLike[str]]) -> tuple[list[int], list[str]]:
        """Catalog ids of files given relative to the library or absolute inside it; (ids, unknown paths)."""
        ids, unknown = [], []
        for p in paths:
            fid = self.library.file_id(p)
            if fid is None:
                unknown.append(os.fspath(p))
            else:
                ids.append(fid)
        return ids, unknown

    def export_csv(self, fh: Any) -> int:  # noqa: ANN401 - a text file object
        """Write `path,tags,favourite` for every file with tags or a favourite mark (tags joined by ';');
        returns the number of rows."""
        import csv

        w = csv.writer(fh, lineterminator="\n")
        w.writerow(TAG_COLUMNS)
        n = 0
        for path, tags, fav in self.library.tag_table():
            w.writerow([path, ";".join(tags), "1" if fav else ""])
            n += 1
        return n

    def import_csv(self, path: str | os.PathLike[str]) -> TagImport:
        """Merge a `path,tags,favourite` CSV into the library: tags are added (none removed), favourite set when
        the column says yes/no (left alone when empty). Rows naming files not in the library, and bad values,
        are reported with their line numbers; every other row is applied."""
        import csv

        out = TagImport()
        changed: set[int] = set()
        with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in ("path", "tags") if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{display_name(path)}: not a tags file (no {' or '.join(missing)} column; "
                                 f"expected {','.join(TAG_COLUMNS)})")
            for row in reader:
                out.rows += 1
                line = reader.line_num
                rel = (row.get("path") or "").strip()
                fid = self.library.file_id(rel) if rel else None
                if fid is None:
                    out.unknown.append((line, rel))
                    continue
                try:
                    tags = [t for t in (row.get("tags") or "").split(";") if t.strip()]
                    fav = (row.get("favourite") or "").strip().lower()
                    if fav and fav not in _YES | _NO:
                        raise ValueError(f"favourite must be yes/no or 1/0, got {fav!r}")
                    before = set(self.library.tags_of(fid))
                    added = self.library.add_tags([fid], tags) if tags else []
                    out.tags_added += len(set(self.library.tags_of(fid)) - before)
                    changed.update(added)
                    if fav:
                        was = fid in self.library.favourite_ids([fid])
                        self.library.set_favourite([fid], fav in _YES)
                        if was != (fav in _YES):
                            changed.add(fid)
                except ValueError as e:
                    out.errors.append((line, str(e)))
        out.files = len(changed)
        self.reembed(sorted(changed))
        return out


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


def search_job(session: SearchSession, text: str, k: int, filters: SearchFilters | None, mode: str = "both",
               names_weight: float | None = None) -> Job[Results]:
    yield {"message": f"searching for “{text}”"}
    hits = session.search(text, k, filters, mode=mode, names_weight=names_weight)
    return Results(hits, text, "text", session.indexed_count(), bool(filters and filters.active))


def similar_job(session: SearchSession, path: str | os.PathLike[str], k: int,
                filters: SearchFilters | None, names_weight: float | None = None) -> Job[Results]:
    yield {"message": f"finding sounds like {display_name(Path(path).name)}"}
    hits = session.similar(path, k, filters, names_weight=names_weight)
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
        "texts": report.texts,
        "text_vectors": report.text_vectors,
        "tag_problems": [{"path": f.path, "error": f.error} for f in report.tag_problems],
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
    out = {**path_fields(hit.path), "name": hit.name, "folder": display_name(hit.folder),
           "score": round(hit.score, 5), "duration": round(hit.duration, 3),
           "best_window_start_s": hit.best_window_start_s, "window_scores": [round(s, 5) for s in hit.window_scores],
           "user_tags": list(hit.user_tags), "favourite": hit.favourite}
    if hit.match is not None:
        m = hit.match
        out["match"] = {"matched_terms": m.matched_terms, "name_score": round(m.name_score, 5),
                        "keyword_score": round(m.keyword_score, 5), "semantic_score": round(m.semantic_score, 5),
                        "sound_score": round(m.sound_score, 5),
                        "fields": {k: display_name(v) for k, v in m.fields.items()},
                        "spans": {k: [list(sp) for sp in v] for k, v in m.spans.items()}}
    return out


# ------------------------------------------------------------------------------------------------ fusion


def check_mode(mode: str) -> str:
    if mode not in SEARCH_MODES:
        raise ValueError(f"search mode must be one of {', '.join(SEARCH_MODES)} (got {mode!r})")
    return mode


def fusion_weight(mode: str, names_weight: float | None) -> float:
    """The names' weight for a mode: sound 0, names 1, both the given weight (checked) or the tuned default."""
    if names_weight is not None:
        if isinstance(names_weight, bool) or not isinstance(names_weight, int | float | np.floating) \
                or not 0.0 <= float(names_weight) <= 1.0:
            raise ValueError(f"names weight must be a number from 0 to 1 (got {names_weight!r})")
    if mode == "sound":
        return 0.0
    if mode == "names":
        return 1.0
    return float(NAMES_WEIGHT if names_weight is None else names_weight)


@dataclass
class Scores:
    fused: float  # the rule's score (sum: w * names + (1 - w) * sound cosine; can be below 0)
    name: float  # 0..1
    keyword: float  # 0..1, BM25 / the best BM25 of the query
    semantic_raw: float  # cosine (0 when the file has no text vector)
    sound: float  # 0..1, min-max over the candidates
    sound_raw: float  # cosine


@dataclass
class Candidates:
    """Each channel's candidates with their raw scores; `fill_*` scores the other channels' candidates exactly
    (their vectors from the catalog), so the fused ranking of the union does not depend on which channel
    found a file."""

    keyword: dict[int, float] = field(default_factory=dict)  # BM25, higher is better
    semantic: dict[int, float] = field(default_factory=dict)  # cosine, names/tags sentence
    sound: dict[int, float] = field(default_factory=dict)  # cosine, audio

    def ids(self) -> list[int]:
        return list(dict.fromkeys([*self.keyword, *self.semantic, *self.sound]))

    def fill_sound(self, lib: Library, model_id: str, q: np.ndarray) -> None:
        self._fill(self.sound, lib, model_id, q)

    def fill_semantic(self, lib: Library, model_id: str, q: np.ndarray) -> None:
        self._fill(self.semantic, lib, model_id, q)

    def _fill(self, scores: dict[int, float], lib: Library, model_id: str, q: np.ndarray) -> None:
        missing = [f for f in self.ids() if f not in scores]
        if not missing:
            return
        qn = np.asarray(q, np.float32) / max(float(np.linalg.norm(q)), 1e-12)  # (D,)
        scores.update(lib.file_scores(model_id, missing, qn))

    def fused(self, w: float, rule: FusionRule | None = None) -> list[tuple[int, Scores]]:
        """(file id, scores) best first, fused by `rule` (default: the shipped one, see `fuse_arrays`) with the
        names' weight w; ties broken by the sound cosine, then the file id."""
        ids = self.ids()
        if not ids:
            return []
        snd = np.array([self.sound.get(f, np.nan) for f in ids], dtype=np.float64)  # (N,)
        kw = np.array([self.keyword.get(f, 0.0) for f in ids])
        sem = np.array([self.semantic.get(f, 0.0) for f in ids])
        fused, name, kw_n, snd_n = fuse_arrays(kw, sem, snd, w, rule or FusionRule())
        have = np.isfinite(snd)
        raw = np.where(have, snd, -np.inf)
        order = np.lexsort((np.array(ids), -raw, -fused))  # fused, then sound, then id
        return [(ids[i], Scores(float(fused[i]), float(name[i]), float(kw_n[i]), float(sem[i]), float(snd_n[i]),
                                float(snd[i]) if have[i] else 0.0)) for i in order]


@dataclass(frozen=True)
class FusionRule:
    """The constants that turn the channels' raw scores into one (see the fusion settings at the top)."""

    keyword_share: float = KEYWORD_SHARE
    sem_floor: float = SEM_FLOOR
    sem_ceil: float = SEM_CEIL
    kind: str = FUSION  # "sum" | "rrf"
    sound_scale: str = SOUND_SCALE  # "cosine" | "minmax" (the sum's sound score)
    rrf_k: float = RRF_K


def fuse_arrays(kw: np.ndarray, sem: np.ndarray, snd: np.ndarray, w: float, rule: FusionRule
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fusion of N candidates' raw scores, vectorised: BM25 (N,) (0: no keyword match), sentence cosine (N,)
    (0: no text vector), sound cosine (N,) (NaN: none). Returns fused, names (0..1), keyword (0..1) and min-max
    sound (0..1, what the result list draws) scores, (N,). Also what bench/search_quality.py cross-validates
    the rules with."""
    have = np.isfinite(snd)
    snd_norm = np.zeros(len(snd))
    if have.any():
        lo, hi = snd[have].min(), snd[have].max()
        snd_norm[have] = (snd[have] - lo) / (hi - lo) if hi - lo > 1e-9 else 1.0
    name = names_score(kw, sem, rule)
    kw_norm = relative_keyword(kw)
    if rule.kind == "rrf":
        k = rule.rrf_k
        fused = np.where(name > 0, w / (k + ranks(name)), 0.0) \
            + np.where(have, (1 - w) / (k + ranks(np.where(have, snd, -np.inf))), 0.0)
        return (k + 1) * fused, name, kw_norm, snd_norm
    if rule.sound_scale == "minmax":
        sound = snd_norm
    else:  # the raw cosine; a file without a sound vector counts as the lowest candidate
        sound = np.where(have, snd, snd[have].min() if have.any() else 0.0)
    return w * name + (1 - w) * sound, name, kw_norm, snd_norm


def relative_keyword(kw: np.ndarray) -> np.ndarray:
    """BM25 (N,) relative to the query's best keyword match, 0..1 (all 0 without a match)."""
    best = float(kw.max(initial=0.0))
    return kw / best if best > 0 else np.zeros(len(kw))


def names_score(kw: np.ndarray, sem: np.ndarray, rule: FusionRule) -> np.ndarray:
    """What the names and tags say about N candidates, 0..1 (N,): relative BM25 and the MiniLM cosine mapped from
    [floor, ceil] (absolute: names that say nothing score 0, however the other candidates score)."""
    sem_map = np.clip((sem - rule.sem_floor) / (rule.sem_ceil - rule.sem_floor), 0.0, 1.0)
    return rule.keyword_share * relative_keyword(kw) + (1 - rule.keyword_share) * sem_map


def ranks(x: np.ndarray) -> np.ndarray:
    """1-based rank of each value, highest first; equal values share the best rank (so the fusion does not
    depend on the order in which the channels listed their candidates). (N,)"""
    return np.searchsorted(np.sort(-x), -x, side="left") + 1.0


def highlight(fields: dict[str, str], query: Query) -> tuple[dict[str, list[tuple[int, int]]], list[str]]:
    """Spans of the query's words (plurals and -ing/-ed forms alike; prefixes by their start) in each field,
    and the query words found."""
    wanted = {names.stem(t): t for t in query.terms if t not in {p.lower() for p in query.prefixes}}
    prefixes = [p.lower() for p in query.prefixes]
    spans: dict[str, list[tuple[int, int]]] = {}
    found: list[str] = []
    for key, text in fields.items():
        for a, b, word in names.word_spans(text):
            term = wanted.get(names.stem(word))
            if term is None:
                term = next((p for p in prefixes if word.startswith(p)), None)
            if term is not None:
                spans.setdefault(key, []).append((a, b))
                found.append(term)
    return spans, list(dict.fromkeys(found))


def sentence_encoder_for(embedder: Any) -> SentenceEncoder | None:  # noqa: ANN401 - any retrieval embedder
    """The text channel's encoder for a session: built on the embedder's own text-tower weights when they are
    the installed MiniLM (the default model: nothing loaded twice), else the shared default one."""
    from app.services.text_tower import SentenceEncoder, default_encoder_file

    if isinstance(embedder, TextTowerType) and embedder.source is not None \
            and embedder.source == default_encoder_file():
        return SentenceEncoder.sharing(embedder)
    return default_text_encoder()


@functools.cache
def default_text_encoder() -> SentenceEncoder | None:
    """all-MiniLM-L6-v2 from the installed wheel (NumPy), shared by every session; None if it is missing."""
    from app.services.text_tower import load_sentence_encoder

    return load_sentence_encoder()
