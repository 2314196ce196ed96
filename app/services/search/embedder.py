"""The retrieval model as the library's `Embedder`, how it is found and loaded, and the threads it may use.

`RetrievalEmbedder` wraps a loaded `RetrievalModel` and the front end stored in its checkpoint (PaSST: log-mel
at 32 kHz; aiSFX: 44.1 kHz). The library cuts files into `window_seconds` windows and zero-pads the last one;
the embedder gives each window exactly the embedding the model gives that audio as a clip of its own: the
zero-padded tail is cut off before the front end (as training computes one log-mel per clip), so a 2-s sound
is embedded as 2 s of audio, not as 2 s + 8 s of silence.

The names channel's sentence encoder (MiniLM, NumPy) is found here too (`sentence_encoder_for`). torch is
imported lazily so that the GUI can import this module without paying for torch at start-up.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.services.jobs import Job
from app.services.library.categories import mapping_path
from app.services.search.text_tower import TextTower as TextTowerType
from core.display import display_name
from core.files import hash_file
from core.finite import require_finite

if TYPE_CHECKING:
    import torch

    from app.services.registry import ModelRegistry
    from app.services.search.text_tower import SentenceEncoder, TextTower
    from core.aisfx_heads import CategoryReader

KIND = "retrieval"
TEXT_CACHE_SIZE = 256  # search-as-you-type asks for the same prefixes again and again
FRONTEND_ROWS = 4  # windows through the front end at once: a 10-s window's spectrogram is 8 MB, 16 of them 130 MB
DEFAULT_ENCODER = object()  # "the default sentence encoder, loaded on first use" (None means: keywords only)


class ModelNotFoundError(LookupError):
    """No retrieval model by that name or path, or none installed at all."""


def search_threads() -> int:
    """Threads for model and FAISS work: all cores but one, which stays with the GUI and the audio callback."""
    return max(1, (os.cpu_count() or 2) - 1)


def trunk_threads() -> int:
    """Threads for the aiSFX tower on the CPU: every core (RetrievalEmbedder runs that many batches at once, each
    ONNX Runtime session single-threaded). Indexing is nearly all tower, and those sessions never spin
    (`core.aisfx_runtime.session_from_bytes`): the threads sleep between batches, so the GUI thread, which
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
        tower = getattr(cfg, "audio_tower", "passt")
        self.aisfx = tower in ("aisfx", "aisfx-student")  # AisfxMel frames, 100-frame blocks (a student too)
        self.onnx_runners = tower == "aisfx"  # core/aisfx_runtime's runners are built for the teacher's trunk
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
        if self.onnx_runners:
            self.set_backend()
        self.sample_rate = int(self.frontend.config.sample_rate)
        self.dim = int(cfg.embed_dim)
        self.window_seconds = float(cfg.audio.window_seconds)
        self.batch_size = batch_size
        self._text_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.text_tower: TextTower | None = None  # the text half in NumPy, when the model was loaded without it
        self._lock = threading.Lock()  # one forward pass at a time (indexing and searching share the model)
        self.categories = category_reader_for(model)  # the aiSFX heads, when this tower's features are theirs
        self.category_names: tuple[str, ...] = self.categories.categories if self.categories else ()

    def set_backend(self, backend: str | None = None) -> str:
        """Run the frozen aiSFX tower through `backend` (`core.aisfx_runtime.accelerate`; default "auto": int8,
        then float ONNX Runtime, then torch) and return the one used. On the CPU its ONNX Runtime sessions run
        single-threaded, `trunk_threads()` batches at once: ~5 % faster than one batch at a time on every core
        (no hand-offs inside each small convolution). A torch tower (PaSST, the torch fallback) runs one batch at
        a time on torch's own threads, and so does the distilled student (no ONNX runner for it yet)."""
        from core.aisfx_runtime import accelerate

        if not self.onnx_runners:
            self.backend, self.workers = "torch", 1
            return self.backend
        parallel = self.device.type == "cpu" and backend != "torch" and trunk_threads() > 1
        self.backend = accelerate(self.model.audio_encoder, backend, threads=1 if parallel else trunk_threads())
        self.workers = trunk_threads() if parallel and self.backend != "torch" else 1
        return self.backend

    # -- construction

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], name: str | None = None, device: str = "cpu",
                        sound_half: bool = False) -> RetrievalEmbedder:
        """`sound_half`: build only the audio tower in torch and embed text with the checkpoint's text tower in
        NumPy (app/services/search/text_tower.py; the same weights): indexing and find similar start seconds sooner and
        in less memory. A text tower that NumPy does not reproduce is loaded whole, as without it."""
        from app.services.search.text_tower import load_text_tower
        from core.inference import load_for_inference
        from models.retrieval import sound_half_from_config_dict

        path = Path(path)
        name = name or path.stem
        model_id = model_id_for(name, path)
        text = load_text_tower(path, name, model_id) if sound_half else None
        run = load_for_inference(path, kind=KIND, device=device,
                                 builder=sound_half_from_config_dict if text is not None else None)
        embedder = cls(run.model, run.frontend, name=name, model_id=model_id)
        embedder.text_tower = text
        return embedder

    @classmethod
    def from_registry(cls, registry: ModelRegistry, name: str) -> RetrievalEmbedder:
        from core.checkpoints import read_metadata
        from core.inference import inference_for

        entry = registry.get(name)
        if entry.kind != KIND:
            raise ValueError(f"{name} is a {entry.kind!r} model, not a retrieval model")
        run = inference_for(registry.load(name), KIND, read_metadata(entry.path))
        return cls(run.model, run.frontend, name=name, model_id=model_id_for(name, entry.path))

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

    def embed_windows_with_categories(self, audio_windows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """As `embed_windows`, with each window's category probabilities (`embed_prepared_with_categories`)."""
        return self.embed_prepared_with_categories([self.prepare_windows(audio_windows)])

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
            for n, group in groups.items():
                for at in range(0, len(group), FRONTEND_ROWS):
                    rows = group[at:at + FRONTEND_ROWS]
                    prepared.groups.append(self._front_end(x, rows, n, lengths))
        return prepared

    def _front_end(self, x: np.ndarray, rows: list[int], n: int, lengths: np.ndarray
                   ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor | None]:
        """Front-end frames of some windows of one group (cut or padded to n samples)."""
        import torch

        with torch.inference_mode():
            wave = torch.from_numpy(_padded(x[rows], n)).to(self.device)  # (b, n)
            real = torch.from_numpy(np.minimum(lengths[rows], n)).to(self.device)  # (b,)
            if self.aisfx:  # (b, T, 96), each row peak-normalised over its real samples; (b,) real frames
                return np.asarray(rows), self.frontend(wave, real), self.frontend.num_frames(real)
            # PaSST groups are of one real length, n: one window, never two
            return np.asarray(rows), self.frontend(wave)[..., : self.model.config.audio.window_frames], None

    def embed_prepared(self, batches: Sequence[PreparedWindows]) -> np.ndarray:
        """Prepared windows (of one or several files) -> (sum of their windows, dim) unit vectors, in order.
        Frames of one shape are embedded together, across files, in batches of `batch_size`."""
        return self.embed_prepared_with_categories(batches)[0]

    def embed_prepared_with_categories(self, batches: Sequence[PreparedWindows]
                                       ) -> tuple[np.ndarray, np.ndarray | None]:
        """As `embed_prepared`, with each window's probabilities over `category_names` ((n, K); None when the
        model has no category heads): the heads read the same tower pass."""
        import torch

        n = sum(len(b) for b in batches)
        out = np.zeros((n, self.dim), dtype=np.float32)
        cats = np.zeros((n, len(self.category_names)), dtype=np.float32) if self.categories else None
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
            for (rows, _, _), (vecs, probs) in zip(tasks, done, strict=True):
                out[rows] = vecs
                if cats is not None and probs is not None:
                    cats[rows] = probs
        require_finite(out, f"{self.name}: audio embeddings")  # a broken model is refused, never indexed
        return out, cats

    def _embed_frames(self, task: tuple[np.ndarray, torch.Tensor, torch.Tensor | None]
                      ) -> tuple[np.ndarray, np.ndarray | None]:
        """One batch of front-end frames (+ real frame counts) -> (b, dim) vectors and (b, K) category
        probabilities (None without heads); runs on a worker thread."""
        import torch

        _, feats, frames = task
        with torch.inference_mode():
            features = self.model.audio_features(feats, frames)  # (b, D) tower features
            vecs = self.model.embed_audio_features(features).float().cpu().numpy()
            probs = self.categories.probabilities(features.float().cpu().numpy()) if self.categories else None
        return vecs, probs

    def _group(self, n: int) -> int:
        """Windows embedded together: those of one real length; for aiSFX also every window shorter than one
        100-frame block (the tower pads each to a block, so they make one batch: ~2x fewer, fuller trunk runs
        on a library of short one-shots). Returns the samples each group's batch is cut or padded to."""
        if not self.aisfx:
            return n
        block = self.model.audio_encoder.config.block_frames
        short = (block - 1) * self.frontend.config.hop_length  # n samples give n // hop + 1 frames
        return max(n, short)

    def _embed_new(self, texts: list[str]) -> np.ndarray:
        """N texts -> (N, dim) unit vectors, computed now (no cache)."""
        import torch

        if self.text_tower is not None:
            vecs = self.text_tower.embed_text(texts)  # (N, dim)
        else:
            with self._lock, torch.inference_mode():
                vecs = self.model.embed_text(texts).float().cpu().numpy()  # (N, dim)
        require_finite(vecs, f"{self.name}: text embeddings")
        return vecs

    def embed_text(self, texts: list[str]) -> np.ndarray:
        """N texts -> (N, dim) unit vectors; recent queries come from a small cache."""
        unique = list(dict.fromkeys(texts))
        if len(unique) > TEXT_CACHE_SIZE:  # a batch, not typing: the cache could not hold it while it is read back
            return self._embed_new(list(texts))
        missing = [t for t in unique if t not in self._text_cache]
        if missing:
            vecs = self._embed_new(missing)
            for t, v in zip(missing, vecs, strict=True):
                self._text_cache[t] = v
        for t in texts:
            self._text_cache.move_to_end(t)
        while len(self._text_cache) > TEXT_CACHE_SIZE:
            self._text_cache.popitem(last=False)
        return np.stack([self._text_cache[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def category_reader_for(model: Any) -> CategoryReader | None:  # noqa: ANN401 - a RetrievalModel
    """The aiSFX heads read through the shipped mapping, for a model whose tower is the frozen aiSFX teacher
    (a fine-tuned or distilled tower's features are not the ones the heads were trained on); None otherwise,
    or when the heads or the mapping cannot be read (the library then stores no categories). The mapping is
    the shipped one unless $EARSHOT_CATEGORY_MAPPING names another file."""
    from core.aisfx_heads import HEAD_DIM, HeadsError, category_reader

    audio = getattr(model.config, "audio", None)
    mapping = mapping_path()
    if getattr(model.config, "audio_tower", "") != "aisfx" or not getattr(audio, "frozen", False) \
            or getattr(audio, "train_top_block", True) or getattr(audio, "embed_dim", 0) != HEAD_DIM \
            or not mapping.is_file():
        return None  # (a small test tower has other features than the heads read)
    try:
        return category_reader(mapping)
    except HeadsError:
        return None


def model_id_for(name: str, path: str | os.PathLike[str]) -> str:
    """Checkpoint name + a short hash of its bytes: retrained weights under the same name get a new index."""
    return f"{name}-{hash_file(path)[:12]}"


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


def resolve_model(spec: str | None = None, registry: ModelRegistry | None = None) -> tuple[str, Path]:
    """(name, checkpoint path) from a registry name, a path to a checkpoint file, or the default model. A path
    is checked now, so a file that is no retrieval checkpoint is refused by what is wrong with it."""
    from app.services.registry import ModelRegistry

    if spec and _names_a_path(spec):
        return _checked_path(Path(spec).expanduser())
    registry = registry or ModelRegistry()
    if not registry.entries():
        registry.scan()
    if spec and spec not in {e.name for e in registry.entries()} and os.path.lexists(Path(spec).expanduser()):
        return _checked_path(Path(spec).expanduser())  # `--model notes.txt`: a file here, not a registry name
    if spec:
        try:
            entry = registry.get(spec)
        except KeyError as e:
            broken = [p.message for p in registry.problems if p.path.stem == spec]  # listed, but unreadable
            raise ModelNotFoundError(broken[0] if broken else str(e).strip("'\"")) from None
        if entry.kind != KIND:
            raise ModelNotFoundError(f"{spec} is a {entry.kind} model, not a retrieval model")
        return entry.name, entry.path
    entry = registry.default_for(KIND)
    if entry is None:
        raise ModelNotFoundError("no retrieval model installed: train one (`earshot train retrieval` or the Train "
                                 "tab), or pass --model PATH.safetensors")
    return entry.name, entry.path


def _names_a_path(spec: str) -> bool:
    """Whether --model's text can only be a path (registry names are bare file stems)."""
    return spec.endswith(".safetensors") or os.sep in spec or "/" in spec


def _checked_path(path: Path) -> tuple[str, Path]:
    """(name, path) of a retrieval checkpoint file; a CheckpointError (damaged, foreign, a folder, another
    kind of model) or ModelNotFoundError (no such file) otherwise. Reads the header only, not the weights."""
    from core.checkpoints import CheckpointError, read_metadata

    if not os.path.lexists(path):
        raise ModelNotFoundError(f"{display_name(path)}: no such checkpoint file")
    kind = read_metadata(path)["kind"]
    if kind != KIND:
        raise CheckpointError(f"{path.name}: a {kind} model, not a retrieval model")
    return path.stem, path


def load_embedder(spec: str | None = None, registry: ModelRegistry | None = None, device: str = "cpu"
                  ) -> RetrievalEmbedder:
    """A retrieval model for indexing and searching from the command line: its sound half in torch, its text
    tower in NumPy where it can be (RetrievalEmbedder.from_checkpoint(sound_half=True))."""
    name, path = resolve_model(spec, registry)
    embedder = RetrievalEmbedder.from_checkpoint(path, name=name, device=device, sound_half=True)
    embedder.warm_up()
    sentence_encoder_for(embedder)  # the names' encoder too: the first index or search does not wait for it
    return embedder


class LazyEmbedder:
    """A retrieval model known by its name and index id, loaded on first real use. Find similar on a file already
    in the library reads that file's stored vector: it needs the model's id, not the model (no torch import, no
    ONNX session), so the command answers in about a second instead of several."""

    def __init__(self, spec: str | None = None, registry: ModelRegistry | None = None, device: str = "cpu") -> None:
        self.name, self.path = resolve_model(spec, registry)  # a damaged or foreign file is refused now
        self.model_id = model_id_for(self.name, self.path)
        self._spec, self._registry, self._device = spec, registry, device
        self._model: RetrievalEmbedder | None = None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def __getattr__(self, attr: str) -> Any:  # noqa: ANN401 - anything the loaded embedder has
        if attr.startswith("_"):  # never load for Python's own probes (copy, pickle, hasattr of dunders)
            raise AttributeError(attr)
        if self._model is None:
            self._model = load_embedder(self._spec, self._registry, self._device)
        return getattr(self._model, attr)


def load_query_embedder(spec: str | None = None, registry: ModelRegistry | None = None
                        ) -> RetrievalEmbedder | TextTower:
    """What text queries need and nothing more: the checkpoint's text tower run in NumPy when it is a plain
    BERT (no torch import, so `earshot search` starts in a fraction of the time), else the whole model."""
    from app.services.search.text_tower import load_text_tower

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


def sentence_encoder_for(embedder: Any) -> SentenceEncoder | None:  # noqa: ANN401 - any retrieval embedder
    """The text channel's encoder for a session: built on the embedder's own text-tower weights when they are
    the installed MiniLM (the default model: nothing loaded twice), else the shared default one."""
    from app.services.search.text_tower import SentenceEncoder, default_encoder_file

    tower = getattr(embedder, "text_tower", None) or embedder  # a sound-half embedder's NumPy text tower
    if isinstance(tower, TextTowerType) and tower.source is not None and tower.source == default_encoder_file():
        return SentenceEncoder.sharing(tower)
    return default_text_encoder()


@functools.cache
def default_text_encoder() -> SentenceEncoder | None:
    """all-MiniLM-L6-v2 from the installed wheel (NumPy), shared by every session; None if it is missing."""
    from app.services.search.text_tower import load_sentence_encoder

    return load_sentence_encoder()
