"""The incremental, threaded index job: bring a model's vectors up to date with the folder, names first.

Pass 1 (seconds, no audio decoded): a catalog row for every new file (its header's duration, rate, channels) and
the text channel brought up to date (names, folders, embedded tags -> keywords and sentence vectors), so that a
name search answers before any sound is embedded. Pass 2: the audio. Only new and changed files are read.
Worker threads hash, decode and (when the embedder has `prepare_windows`) run its front end ahead of the model
through a bounded queue, so that work overlaps the model's runs, and tell the job what they found in typed messages
(Known, Windows, Done, Error, Gone, Away, Changed, Fatal); the job (a generator) embeds in batches and commits each
file in its own transaction through `library.files.record`. Files that fail (corrupt, empty, header only) are
recorded with status 'error' and skipped until they change; files that could not be read at all (no hash) are
retried every run. A file whose folder goes away while the run reads it (made unreadable, unmounted, renamed) is
never failed nor removed: every catalogued file under that folder is kept, hidden, as when the scan finds it away.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.services.jobs import Job, Progress
from app.services.library import scan
from app.services.library.catalog import CatalogRow
from app.services.library.embedding import (
    LONG_FILE_WINDOWS,
    embed_with_categories,
    pool,
    pool_categories,
    window_count,
    windows_of,
)
from app.services.library.eta import RateEta, work_of
from app.services.library.library import Library
from app.services.library.records import BrokenModelError, Embedder, FailedFile, IndexReport, PathLike, TextEncoder
from app.services.library.scan import ScannedFile
from app.services.library.text_channel import TEXT_BATCH, derive_text, embed_sentences
from core import memory
from core.audio import AudioError, AudioInfo, audio_info
from core.display import display_name
from core.files import hash_file

NAMES_CHUNK = 256  # new files named per transaction in pass 1 (a progress report, a cancel point between)
HEADERS_CHUNK = 256  # headers read between progress reports: 30,000 files take ~20 s, which Pause and Cancel
# (and closing the window) would otherwise wait out
TRIM_EVERY_S = 1.0  # freed memory is handed back at most this often (core/memory.py)
PAUSED_S = 1.0  # a job resumed this long after it yielded was paused: the ETA leaves that time out

# ------------------------------------------------------------------- what the readers tell the job (one queue)


@dataclass(frozen=True)
class Known:
    """The file's content is already catalogued (moved, copied or touched): nothing to read."""

    task: int
    digest: str
    stat: os.stat_result


@dataclass(frozen=True)
class Windows:
    """A batch of the file's windows: raw (w, S) or what the embedder's front end made of them, and how much of
    each is real audio (w,)."""

    task: int
    windows: Any
    cover: np.ndarray


@dataclass(frozen=True)
class Done:
    """The file was read to the end, unchanged meanwhile."""

    task: int
    digest: str
    info: AudioInfo
    stat: os.stat_result


@dataclass(frozen=True)
class Error:
    """The file cannot be indexed (corrupt, empty, unreadable): recorded as failed."""

    task: int
    digest: str | None
    message: str
    stat: os.stat_result | None


@dataclass(frozen=True)
class Gone:
    """The file disappeared."""

    task: int


@dataclass(frozen=True)
class Away:
    """The file's folder went away meanwhile (scan.away_folder): the file is kept, hidden, not read."""

    task: int
    folder: str  # relative to the library root, '' = the root
    why: str


@dataclass(frozen=True)
class Changed:
    """The file changed while it was read: read it again."""

    task: int


@dataclass(frozen=True)
class Fatal:
    """The model's front end failed on decoded audio: the model's fault, never the file's; the job stops."""

    task: int
    error: Exception


Message = Known | Windows | Done | Error | Gone | Away | Changed | Fatal


@dataclass
class _Task:
    file: ScannedFile
    digest: str | None = None  # known and unchanged: no need to hash again
    tries: int = 0  # times re-queued because the file changed while it was read
    reuse: bool = True  # False: read it even if its content is known
    duration: float | None = None  # the catalog's, for a file listed and unchanged since: its header not read again


@dataclass
class _Pending:
    """Windows of one file embedded so far."""

    vectors: list[np.ndarray] = field(default_factory=list)  # [(w, D)]
    cover: list[np.ndarray] = field(default_factory=list)  # [(w,)]
    categories: list[np.ndarray] = field(default_factory=list)  # [(w, K)], when the model has category heads
    done: Done | None = None  # once the reader finished
    waiting: int = 0  # windows read but not embedded yet (in the batch or on the embedding thread)


class _Reader:
    """Runs in the thread pool: hash a file, then decode it into batches of windows onto the queue."""

    def __init__(self, embedder: Embedder, known: frozenset[str], batch: int, out: queue.Queue,
                 stop: threading.Event, max_windows: int = 0, root: str = "",
                 devices: dict[str, int] | None = None) -> None:
        self.embedder, self.known, self.batch, self.out, self.stop = embedder, known, batch, out, stop
        self.max_windows = max_windows  # a long file's windows embedded (0: all; embedding.spread_windows)
        self.root, self.devices = root, devices or {}  # the library folder; the scan's devices (scan.away_folder)

    def put(self, msg: Message) -> bool:
        while not self.stop.is_set():
            try:
                self.out.put(msg, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __call__(self, idx: int, task: _Task) -> None:
        path, digest, st0 = task.file.path, task.digest, None
        try:
            st0 = scan.stat_file(path)
            digest = digest or hash_file(path, self.stop)
            if digest is None:
                return  # stopped
            if digest in self.known and task.reuse:
                self.put(Known(idx, digest, st0))
                return
            info = audio_info(path)
            prepare = getattr(self.embedder, "prepare_windows", None)  # front end here, ahead of the model
            for windows, cover in windows_of(path, self.embedder, self.batch, self.max_windows, info):
                try:
                    payload = windows if prepare is None else prepare(windows)
                except Exception as e:  # decoded audio that the model's front end cannot take: the model's fault
                    self.put(Fatal(idx, e))  # (out of memory, a broken front end), never the file's
                    return
                if self.stop.is_set() or not self.put(Windows(idx, payload, cover)):
                    return
            if self._changed(path, st0):
                self.put(Changed(idx))
                return
            self.put(Done(idx, digest, info, st0))
        except Exception as e:
            away = scan.away_folder(self.root, task.file.rel, self.devices) if self.root else None
            if away is not None:  # its folder's fault, not the file's: neither failed nor gone
                self.put(Away(idx, *away))
            elif isinstance(e, FileNotFoundError) or not os.path.lexists(path):
                self.put(Gone(idx))
            elif st0 is not None and self._changed(path, st0):
                self.put(Changed(idx))
            else:
                if isinstance(e, AudioError):
                    message = str(e)
                elif isinstance(e, OSError):
                    message = scan.os_message(path, e)
                else:
                    message = f"{display_name(path)}: unexpected error ({e!r})"
                # name the file relative to the library, which may move
                message = message.replace(display_name(path), display_name(task.file.rel))
                self.put(Error(idx, digest, message, st0))

    @staticmethod
    def _changed(path: str, st0: os.stat_result) -> bool:
        try:
            st1 = scan.stat_file(path)
        except OSError:
            return True
        return (st1.st_size, st1.st_mtime_ns) != (st0.st_size, st0.st_mtime_ns)


class _IndexRun:
    """State of one `index_library` run; the generator is `run()`."""

    def __init__(self, lib: Library, embedder: Embedder, workers: int, batch_size: int, queue_size: int,
                 checkpoint_seconds: float, include_hidden: bool, retry_failed: bool, max_requeue: int,
                 rehash: bool = False) -> None:
        self.lib, self.embedder, self.model_id = lib, embedder, embedder.model_id
        self.workers, self.batch_size, self.checkpoint_seconds = max(1, workers), batch_size, checkpoint_seconds
        self.include_hidden, self.retry_failed, self.max_requeue = include_hidden, retry_failed, max_requeue
        self.rehash = rehash
        self.text_encoder: TextEncoder | None = None
        self.max_windows = LONG_FILE_WINDOWS
        self.trimmed = time.monotonic()
        self.report = IndexReport(self.model_id)
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.out: queue.Queue = queue.Queue(maxsize=max(1, queue_size))
        self.pool: ThreadPoolExecutor | None = None
        # one batch is embedded on this thread while the job reads the next and commits files
        self.embedding_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="earshot-embed")
        self.embedding: tuple[list[tuple[int, Any, np.ndarray]], list[_Pending], Future] | None = None
        self.reader: _Reader | None = None
        self.tasks: list[_Task] = []
        self.seen: set[bytes] = set()  # relative paths present in the folder
        self.hidden: set[int] = set()  # files under folders the scan found away (kept, hidden)
        self.went_away: dict[str, str] = {}  # relative folders that went away while the run read them -> why
        self.reported: set[str] = set()  # those of them the report names already
        self.devices: dict[str, int] = {}  # the scan's root and mount points -> their devices
        self.scanned: dict[bytes, int] = {}  # their mtimes when scanned
        self.state: dict[int, _Pending] = {}  # files being embedded
        # (task, windows (w, S) or the embedder's prepared windows, coverage (w,))
        self.batch: list[tuple[int, Any, np.ndarray]] = []
        self.done = 0
        self.outstanding = 0  # tasks the readers have not finished
        self.unnamed: list[ScannedFile] = []  # new files: no catalog row yet (pass 1 adds one)
        self.work: list[float] = []  # per task: its seconds of audio and a file's cost (eta.work_of), from its header
        self.remaining_work = 0.0  # of the tasks not finished
        self.eta = RateEta()
        self.phase = "scanning"  # scanning | names | audio | done

    # ------------------------------------------------------------------------------------------ planning

    def plan(self) -> frozenset[str]:
        """Decide which files to read; drop rows that cannot have moved; return the hashes known already."""
        lib, r = self.lib, self.report
        found = scan.scan_folder(lib.root, self.include_hidden)
        r.files_seen, r.scan_errors = len(found.files), found.errors
        lib.vectors.register_model(self.embedder)
        lib.vectors.index(self.model_id)  # load and repair before changing anything
        # a model with category heads reads again the files whose vectors came before them (once)
        rows = lib.files.rows(self.model_id, categorised=bool(getattr(self.embedder, "category_names", ())))
        self.seen = {f.key for f in found.files}
        self.scanned = {f.key: f.mtime_ns for f in found.files}
        self.devices = found.devices
        # rows under folders that are away (a network share briefly down, a drive not mounted) are kept, hidden,
        # not re-read
        away: list[CatalogRow] = []
        for rel, why in self.away_folders(found).items():
            key = os.fsencode(rel)
            under = [w for k, w in rows.items() if k not in self.seen and _under(k, key)]
            if under and why:
                r.scan_errors.append(f"{display_name(lib.root / rel)}: {why}: {len(under)} catalogued files kept, "
                                     "hidden until it is back")
            away += under
        self.seen |= {w.path for w in away}
        self.hidden = {w.id for w in away}
        lib.files.set_unavailable(sorted(self.hidden))
        r.unavailable = len(self.hidden)
        for f in found.files:
            row = rows.get(f.key)
            if row is None:
                self.unnamed.append(f)
            if row is None or (row.size, row.mtime_ns) != (f.size, f.mtime_ns) or self.rehash:
                self.tasks.append(_Task(f))
            elif (row.status == "ok" and row.has_vector) or (
                    row.status == "error" and row.hash is not None and not self.retry_failed):
                r.unchanged += 1  # unreadable files (no hash) are retried: permissions change without mtime
            else:  # listed, unchanged, not embedded yet (an earlier run stopped): its header is known
                self.tasks.append(_Task(f, row.hash if row.status == "ok" else None, duration=row.duration))
        # vanished rows whose size matches no file to read cannot have moved: drop them now
        sizes = {t.file.size for t in self.tasks}
        r.removed += lib.files.delete([w.id for k, w in rows.items() if k not in self.seen and w.size not in sizes])
        return frozenset(w.hash for w in rows.values()
                         if w.hash and (w.has_vector or (w.status == "error" and not self.retry_failed)))

    def away_folders(self, found: scan.ScanResult) -> dict[str, str]:
        """Folders whose catalogued files are away, not deleted -> why ('' when the scan said so already): those
        that cannot be listed, links whose target is gone, mount points found empty (the share or drive is not
        mounted: one now, or one when last scanned), and a library folder with nothing in it at all. Remembers
        the mount points for the next run."""
        recorded = set(self.lib.files.mount_points())
        away = dict.fromkeys(found.unreadable, "")
        away |= dict.fromkeys(found.dangling, "the folder this link points to is gone")
        for rel in found.empty:
            if rel == "":
                away[rel] = "the library folder is empty"
            elif rel in recorded or rel in found.mounts:
                away[rel] = "an empty mount point (is the drive or share mounted?)"
        self.lib.files.set_mount_points([*found.mounts, *(rel for rel in recorded if rel in away)])
        return away

    # -------------------------------------------------------------------------------------------- running

    def progress(self, message: str, part: tuple[str, int, int] | None = None) -> Progress:
        """A progress report: files, audio embedded, the phase, the time left at the measured rate (None while it
        is being measured, and outside the audio pass) and, in the names pass, which of its steps runs and how far
        it is (`part`, `part_done` of `part_total`: the GUI words it without parsing the message)."""
        eta = self.eta.eta(time.monotonic(), self.remaining_work) if self.phase == "audio" else None
        n = len(self.tasks)
        out: Progress = {"step": self.done, "total": n, "files_done": self.done, "files_total": n,
                         "audio_seconds": self.report.audio_seconds, "eta_s": eta, "phase": self.phase,
                         "message": message}
        if part is not None:
            out["part"], out["part_done"], out["part_total"] = part
        return out

    def emit(self, message: str, part: tuple[str, int, int] | None = None) -> Iterator[Progress]:
        """Yield a progress report; a resume long after it means the runner paused the job: not the work's time."""
        before = time.monotonic()
        yield self.progress(message, part)
        if (gap := time.monotonic() - before) > PAUSED_S:
            self.eta.pause(gap)

    def embedded_seconds(self, duration: float) -> float:
        """How much of a file's audio the model reads: a long file only its spread windows (embedding.py)."""
        window = float(getattr(self.embedder, "window_seconds", 0.0) or 0.0)
        return min(duration, self.max_windows * window) if self.max_windows and window > 0 else duration

    def names_pass(self) -> Iterator[Progress]:
        """Pass 1, before any audio is read: a row for each new file with what its header says, then the text
        channel (names, folders, tags; their sentence vectors), each committed as it goes. Also sizes each task's
        work for the ETA (headers are cheap: no audio is decoded)."""
        self.phase = "names"
        infos: dict[bytes, AudioInfo | None] = {}
        unread = [t for t in self.tasks if t.duration is None]  # new or changed files (the rest: the catalog's)
        for n, t in enumerate(unread, 1):
            infos[t.file.key] = header_of(t.file.path)
            if n % HEADERS_CHUNK == 0 and n < len(unread):
                yield from self.emit(f"looking at files ({n}/{len(unread)})", ("headers", n, len(unread)))
        # a file whose header cannot be read is not listed before pass 2 has said why (it fails there)
        unnamed = [(f, info) for f in self.unnamed if (info := infos.get(f.key)) is not None]
        for start in range(0, len(unnamed), NAMES_CHUNK):
            self.lib.files.add_named(unnamed[start:start + NAMES_CHUNK])
            part = ("listing", min(start + NAMES_CHUNK, len(unnamed)), len(unnamed))
            yield from self.emit(f"reading names ({part[1]}/{part[2]})", part)
        durations = (t.duration if t.duration is not None else getattr(infos[t.file.key], "duration", None)
                     for t in self.tasks)
        sized = [work_of(self.embedded_seconds(d) if d is not None else None) for d in durations]
        known = [w for w in sized if w is not None]
        typical = sum(known) / len(known) if known else 1.0  # a file whose header says nothing: a typical one
        self.work = [typical if w is None else w for w in sized]
        self.remaining_work = sum(self.work)
        yield from self.text_pass()
        self.phase = "audio"
        yield {**self.progress("names and tags searchable; embedding the audio"), "names_ready": True}

    def run(self) -> Job[IndexReport]:
        yield self.progress("scanning folder")
        known = self.plan()
        yield from self.names_pass()
        self.reader = reader = _Reader(self.embedder, known, self.batch_size, self.out, self.stop, self.max_windows,
                                       os.path.abspath(self.lib.root), self.devices)
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="earshot-index")
        # in an order that mixes the library's folders (a fixed shuffle by path): the rate measured on the first
        # files is that of the whole library, not of the folder of long tracks that the scan lists first
        for i in sorted(range(len(self.tasks)), key=lambda i: zlib.crc32(self.tasks[i].file.key)):
            self.pool.submit(reader, i, self.tasks[i])
        self.outstanding = len(self.tasks)
        last_beat = last_save = time.monotonic()
        while self.outstanding or self.state:
            try:
                msg = self.out.get(timeout=0.05 if self.batch else 0.25)
            except queue.Empty:
                msg = None
            if msg is None:  # the readers are behind: embed what we have; let the runner pause/cancel
                if self.batch or any(p.done for p in self.state.values()):
                    self.flush()
                    yield from self.emit(f"embedded {self.done}/{len(self.tasks)} files")
                elif time.monotonic() - last_beat > 0.5:
                    last_beat = time.monotonic()
                    yield from self.emit("reading files")
                continue
            if self.handle(msg):
                yield from self.emit(display_name(self.tasks[msg.task].file.rel))
            if time.monotonic() - last_save > self.checkpoint_seconds:
                self.lib.vectors.save(self.model_id)
                last_save = time.monotonic()
        # what vanished and was not found elsewhere leaves the catalog and the index; what went away stays
        rows = self.lib.files.rows(self.model_id)
        self.hide_away(rows)
        self.report.removed += self.lib.files.delete([w.id for k, w in rows.items() if k not in self.seen])
        self.lib.vectors.save(self.model_id)
        if self.report.moved or self.report.removed:
            self.lib.user_tags.mirror()  # the tags of moved and removed files: their paths in the mirror
        self.phase = "done"
        yield from self.text_pass()  # files that moved, or changed while pass 2 read them
        self.hide_away(self.lib.files.rows(self.model_id))  # a folder that went away while their tags were read
        if self.model_id in self.lib.vectors.model_errors():
            self.lib.vectors.set_model_error(self.model_id, None)  # it works now
        self.report.elapsed_s = time.monotonic() - self.t0
        yield {**self.progress("done"), "step": len(self.tasks)}
        return self.report

    def hide_away(self, rows: dict[bytes, CatalogRow]) -> None:
        """Every catalogued file under a folder that went away during the run is kept, hidden (with those the scan
        found away), and the report says which folder and how many; none of them is removed."""
        folders = {f: why for f, why in self.went_away.items() if f not in self.reported
                   and not any(o != f and _under(os.fsencode(f), os.fsencode(o)) for o in self.went_away)}
        self.reported |= set(self.went_away)
        for folder, why in sorted(folders.items()):
            under = [w for k, w in rows.items() if _under(k, os.fsencode(folder))]
            self.seen |= {w.path for w in under}
            self.hidden |= {w.id for w in under}
            self.report.scan_errors.append(f"{display_name(self.lib.root / folder)}: {why}: {len(under)} catalogued "
                                           "files kept, hidden until it is back")
        if folders:
            self.lib.files.set_unavailable(sorted(self.hidden))
            self.report.unavailable = len(self.hidden)

    def is_away(self, key: bytes) -> bool:
        return any(_under(key, os.fsencode(f)) for f in self.went_away)

    def text_pass(self) -> Iterator[Progress]:
        """Derive the text of new, renamed and changed files (names, folders, tags: no audio is read) and embed
        the sentences that changed; upgraded catalogs get all their text here. Files whose folder is away keep
        their text until it is back (a tag read that fails there is the folder's, not the file's)."""
        lib, r = self.lib, self.report
        stale = [s for s in lib.text.stale() if s[0] not in self.hidden and not self.is_away(s[1])]
        for n, (fid, key, mtime_ns) in enumerate(stale):
            text = derive_text(lib.root, key)
            if text.problem and (away := scan.away_folder(os.path.abspath(lib.root), os.fsdecode(key), self.devices)):
                self.went_away.setdefault(*away)
                continue
            if self.phase == "names":  # derived from the file as scanned, which pass 2 records: not stale then
                mtime_ns = self.scanned.get(key, mtime_ns)
            if lib.text.store(fid, key, mtime_ns, text):
                r.texts += 1
                if text.problem:
                    r.tag_problems.append(FailedFile(os.fsdecode(key), text.problem, fid))
            if n % 50 == 49:
                yield from self.emit(f"reading names and tags ({n + 1}/{len(stale)})", ("reading", n + 1, len(stale)))
        enc = self.text_encoder
        if enc is None:
            return
        lib.text.register_model(enc)
        lib.vectors.index(enc.model_id)
        pending = lib.text.pending_vectors(enc.model_id)
        done = 0
        for start in range(0, len(pending), TEXT_BATCH):  # the encoder runs each chunk 64 per forward pass
            chunk = pending[start:start + TEXT_BATCH]
            batch = embed_sentences(enc, chunk)
            r.text_vectors += sum(v is not None for _, _, v in batch)
            lib.text.store_vectors(enc.model_id, batch)
            done += len(chunk)
            yield from self.emit(f"embedding names and tags ({done}/{len(pending)})", ("embedding", done, len(pending)))
        lib.vectors.save(enc.model_id)

    def shutdown(self) -> None:
        self.stop.set()
        self.embedding = None
        self.embedding_thread.shutdown(wait=True, cancel_futures=True)
        if self.pool is not None:
            # readers see `stop` within ~0.1 s (even when blocked on the full queue); queued tasks are dropped
            self.pool.shutdown(wait=True, cancel_futures=True)
            with contextlib.suppress(queue.Empty):
                while True:
                    self.out.get_nowait()
        self.lib.vectors.save(self.model_id)
        if self.text_encoder is not None:
            self.lib.vectors.save(self.text_encoder.model_id)

    # ------------------------------------------------------------------------------------------ messages

    def handle(self, msg: Message) -> bool:
        """Act on one reader message; True when there is progress to report."""
        if isinstance(msg, Fatal):  # raised here, in the job: it stops, and no file is marked failed
            raise msg.error
        i = msg.task
        t = self.tasks[i]
        match msg:
            case Windows(windows=windows, cover=cover):
                flushed = bool(self.batch) and sum(len(w) for _, w, _ in self.batch) + len(windows) > self.batch_size
                if flushed:
                    self.flush()
                self.state.setdefault(i, _Pending()).waiting += len(windows)
                self.batch.append((i, windows, cover))
                return flushed
            case Done():
                self.state.setdefault(i, _Pending()).done = msg
                self.outstanding -= 1
                if sum(len(w) for _, w, _ in self.batch) >= self.batch_size:
                    self.flush()
                    return True
                return False
        self.forget(i)
        if isinstance(msg, Changed):
            self.report.requeued += 1
            if t.tries < self.max_requeue:
                t.tries, t.digest = t.tries + 1, None
                self.pool.submit(self.reader, i, t)
                return False
            msg = Error(i, None, f"{display_name(t.file.rel)}: the file kept changing while it was being indexed",
                        None)
        match msg:
            case Known(digest=digest, stat=stat):
                self.collect()  # files whose windows are all embedded are committed first, as before the model
                self.store_ready()  # had a thread of its own: a known hash one of them replaced is then stale
                if not self.store_known(t, digest, stat):
                    t.reuse = False  # its content was replaced meanwhile: read it after all
                    self.pool.submit(self.reader, i, t)
                    return False
            case Error(digest=digest, message=message, stat=stat):
                self.store_error(t, digest, message, stat)
            case Gone():
                self.seen.discard(t.file.key)
            case Away(folder=folder, why=why):
                self.went_away.setdefault(folder, why)
        self.outstanding -= 1
        self.finished(i)
        return True

    def finished(self, i: int, embedded: bool = False) -> None:
        """Task i is over: its work leaves what remains; embedded, it also tells the ETA how fast work goes."""
        self.done += 1
        work = self.work[i] if i < len(self.work) else 0.0
        self.remaining_work = max(0.0, self.remaining_work - work)
        if embedded:
            self.eta.done(time.monotonic(), work)

    def forget(self, i: int) -> None:
        """Drop what was read of a file (it changed, failed late, or is known after all)."""
        if self.state.pop(i, None) is not None:
            self.batch[:] = [b for b in self.batch if b[0] != i]

    def refuse_model(self, batch: list[tuple[int, Any, np.ndarray]]) -> None:
        """NaN/inf from the model is the model's fault, not the files': record it against the model (no file
        is marked failed, no other model's vector is touched) and stop."""
        names = sorted(display_name(self.tasks[i].file.rel) for i in {i for i, _, _ in batch})
        message = (f"model {self.model_id!r} is broken: it produced NaN/inf values (for {names[0]}"
                   f"{f' and {len(names) - 1} more' if len(names) > 1 else ''}); indexing with it was refused "
                   "and no file was marked failed")
        self.lib.vectors.set_model_error(self.model_id, message)
        raise BrokenModelError(message)

    def flush(self) -> None:
        """Collect the batch on the embedding thread, hand it the current batch, and commit the files whose
        windows are all embedded. While the model runs, this thread goes on reading messages and committing."""
        self.collect()
        if self.batch:
            batch, self.batch = self.batch, []
            owners = [self.state[i] for i, _, _ in batch]
            future = self.embedding_thread.submit(embed_with_categories, self.embedder,
                                                  [w for _, w, _ in batch])  # (B, D), (B, K) | None
            self.embedding = (batch, owners, future)
        if self.outstanding == 0:  # nothing left to read: wait for the model
            self.collect()
        self.store_ready()

    def store_ready(self) -> None:
        """Commit the files that are read to the end and whose windows are all embedded."""
        for i in [i for i, p in self.state.items() if p.done is not None and p.waiting == 0]:
            self.store_embedded(i)

    def collect(self) -> None:
        """Wait for the batch on the embedding thread and give each file its vectors (files forgotten meanwhile,
        and older reads of files read again, are skipped: their _Pending is no longer the one in `state`)."""
        if self.embedding is None:
            return
        batch, owners, future = self.embedding
        self.embedding = None
        vecs, cats = future.result()
        if not np.isfinite(vecs).all():
            self.refuse_model(batch)
        start = 0
        for (i, w, c), p in zip(batch, owners, strict=True):
            if self.state.get(i) is p:
                p.vectors.append(vecs[start:start + len(w)])
                p.cover.append(c)
                if cats is not None:
                    p.categories.append(cats[start:start + len(w)])
                p.waiting -= len(w)
            start += len(w)

    # ---------------------------------------------------------------------------------------- committing

    def store_embedded(self, i: int) -> None:
        t, p = self.tasks[i], self.state.pop(i)
        digest, info, st = p.done.digest, p.done.info, p.done.stat
        vecs, cover = np.concatenate(p.vectors), np.concatenate(p.cover)  # (W, D), (W,)
        meta = {"duration": info.duration, "sample_rate": info.sample_rate, "channels": info.channels,
                "status": "ok", "error": None}
        names = getattr(self.embedder, "category_names", ())
        categories = pool_categories(np.concatenate(p.categories), cover, names) if p.categories else None
        outcome = self.lib.files.record(self.model_id, t.file, st.st_size, st.st_mtime_ns, digest, self.seen,
                                       meta=meta, vectors=pool(vecs, cover), categories=categories)
        (self.report.moved if outcome == "moved" else self.report.embedded).append(t.file.rel)
        if time.monotonic() - self.trimmed > TRIM_EVERY_S:  # the threads' freed buffers back to the system
            memory.trim()
            self.trimmed = time.monotonic()
        self.report.windows += len(vecs)
        if self.max_windows and window_count(info.duration, self.embedder.window_seconds) > len(vecs):
            self.report.spread += 1
        self.report.audio_seconds += info.duration
        self.finished(i, embedded=True)

    def store_known(self, t: _Task, digest: str, st: os.stat_result) -> bool:
        """Content already catalogued (moved, copied, touched); False if it no longer is."""
        lib, r = self.lib, self.report
        outcome = lib.files.record(self.model_id, t.file, st.st_size, st.st_mtime_ns, digest, self.seen, reuse=True)
        if outcome == "stale":
            return False
        if outcome == "failed":
            r.failed.append(FailedFile(t.file.rel, lib.files.error_of(t.file.key)))
        elif outcome == "touched":
            r.touched += 1
        else:
            (r.moved if outcome == "moved" else r.copied).append(t.file.rel)
        return True

    def store_error(self, t: _Task, digest: str | None, message: str, st: os.stat_result | None) -> None:
        size, mtime_ns = (st.st_size, st.st_mtime_ns) if st else (t.file.size, t.file.mtime_ns)
        meta = {"duration": None, "sample_rate": None, "channels": None, "status": "error", "error": message}
        self.lib.files.record(self.model_id, t.file, size, mtime_ns, digest, self.seen, meta=meta)
        self.report.failed.append(FailedFile(t.file.rel, message))


def _under(key: bytes, folder: bytes) -> bool:
    """Is relative path `key` the folder or inside it ('' = the root)?"""
    return not folder or key == folder or key.startswith(folder + b"/")


def header_of(path: str) -> AudioInfo | None:
    """What a file's header says (no audio decoded); None when it cannot be read: pass 2 finds out why."""
    try:
        return audio_info(path)
    except (AudioError, OSError):
        return None


def index_library(
    library: Library | PathLike,
    embedder: Embedder,
    *,
    workers: int = 2,
    batch_size: int = 16,
    queue_size: int = 4,
    checkpoint_seconds: float = 60.0,
    include_hidden: bool = False,
    retry_failed: bool = False,
    max_requeue: int = 2,
    rehash: bool = False,
    text_encoder: TextEncoder | None = None,
    max_windows: int = LONG_FILE_WINDOWS,
) -> Job[IndexReport]:
    """Bring the catalog and `embedder`'s index up to date with the folder; returns an IndexReport.

    Only new and changed files are read. `workers` threads hash and decode ahead of the embedder through a
    bounded queue (`queue_size` batches of up to `batch_size` windows); this generator embeds in batches
    and commits each file in its own transaction. The index file is written every `checkpoint_seconds`, at
    the end, and when the job is cancelled (closed). One indexing job per Library at a time.
    rehash: hash every file again, not only those whose size or mtime changed (an edit that keeps both is
    otherwise never noticed). Afterwards the text channel catches up (names, folders, tags of new, renamed and
    changed files; `text_encoder` (a sentence encoder, model id `text:...`) embeds the sentences that changed;
    without one the text channel is keywords only). Raises BrokenModelError for a model that yields NaN/inf,
    DiskFullError when the catalog's disk fills up; what was committed before is kept and a later run resumes.
    max_windows: a long file is embedded from this many windows spread evenly over it (0: every window).
    """
    own = not isinstance(library, Library)
    lib = Library.open(library) if own else library
    try:
        with lib.indexing():
            job = _IndexRun(lib, embedder, workers, batch_size, queue_size, checkpoint_seconds, include_hidden,
                            retry_failed, max_requeue, rehash)
            job.text_encoder, job.max_windows = text_encoder, max_windows
            try:
                return (yield from job.run())
            finally:
                job.shutdown()
    finally:
        if own:
            lib.close()
