"""Spoken-term search of a 6.5-s sentence for a typed word, through the Words tab's service (issue 41).

The sentence is espeak-ng's en-us voice saying "The heaven was seven miles away, and eleven people walked there
slowly in the cold rain." (padded with silence to 6.5 s); the query is the typed word "seven". The model is
loaded by the tab's `load_space_job`; `cold` is the first search in the process (the query's phonemes and
embedding, then `term_search_job`), `warm` the median of five more; `every_window` is the same search with
every window embedded exactly (the search before issue 41), for comparison. The hits of both are listed.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from app.services.jobs import drain
from app.services.registry import ModelEntry
from app.services.words.word_space import (
    SAMPLE_RATE,
    TermSearchResult,
    load_space_job,
    query_vector_job,
    term_search_job,
)
from bench.machine import describe
from training.espeak_corpus import espeak_available, synthesise

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "resources" / "models" / "words-default.safetensors"
SENTENCE = "The heaven was seven miles away, and eleven people walked there slowly in the cold rain."
SECONDS = 6.5
QUERY = "seven"


def sentence(seconds: float = SECONDS) -> np.ndarray:
    """espeak-ng en-us saying SENTENCE, 16 kHz, cut or padded with silence to `seconds`."""
    wave = synthesise(SENTENCE, "en-us", 140, 50)
    n = round(seconds * SAMPLE_RATE)
    return np.pad(wave, (0, max(0, n - len(wave))))[:n].astype(np.float32)


def search(space, audio: np.ndarray, exhaustive: bool = False) -> tuple[float, TermSearchResult]:  # noqa: ANN001
    t0 = time.perf_counter()
    vector, duration, _ = drain(query_vector_job(space, QUERY))
    result = drain(term_search_job(space, audio, SAMPLE_RATE, vector, query_duration_s=duration,
                                   exhaustive=exhaustive))
    return time.perf_counter() - t0, result


def hits(result: TermSearchResult) -> list[list[float]]:
    return [[round(h.start_s, 2), round(h.end_s, 2), round(h.score, 3)] for h in result.hits]


def run() -> dict:
    if not espeak_available():
        return {"skipped": "espeak-ng is not installed (apt-get install espeak-ng)"}
    audio = sentence()
    load_before = round(os.getloadavg()[0], 2)
    t0 = time.perf_counter()
    space = drain(load_space_job(None, ModelEntry(name=MODEL.stem, path=MODEL, kind="words", source="default")))
    load_s = time.perf_counter() - t0
    cold_s, first = search(space, audio)
    warm = [search(space, audio)[0] for _ in range(5)]
    every_s, every = search(space, audio, exhaustive=True)
    return {
        "machine": describe(peak=False), "load_1min_before": load_before, "threads": torch.get_num_threads(),
        "recording_s": SECONDS, "query": QUERY, "text": SENTENCE, "model_load_s": round(load_s, 3),
        "cold_s": round(cold_s, 3), "warm_s": round(statistics.median(warm), 3),
        "warm_runs_s": [round(t, 3) for t in warm], "every_window_s": round(every_s, 3),
        "hits": hits(first), "every_window_hits": hits(every), "load_1min_after": round(os.getloadavg()[0], 2),
    }  # fmt: skip
