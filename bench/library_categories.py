"""Issue 39, item 3: do a silent file's sound categories, read as words, help find it? On every development
library's mixed copy (bench/library_quality.py: a seeded half of the files renamed recorder-style), the fused
("both") ranking is scored with the categories weighing CATEGORY_GAIN x their names score, for each gain below:

- the renamed-files mAP@10 (library_quality.renamed_ranks: the renamed files' order, against the renamed relevant
  ones), beside Sound mode's and random;
- the whole list's mAP@10, beside the baseline script's (bench/names_baseline.py).

The rule, fixed before any run: the gain (and the sentence each category is read as: its name, or its name and
its UCS subcategories) is the one with the best mean renamed-files mAP@10 over the tuning
libraries' mixed copies (search_libraries.TUNING), among the gains that lower no tuning copy's whole-list mAP@10
(original or mixed) by more than 0.01 against gain 0; leave-one-library-out among the tuning libraries is
reported beside it. The held-out libraries are only scored, at the chosen gain and at 0 (categories off).

`python -m bench.library_categories [--library NAME ...]` (JSON to stdout; a table to stderr)
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from app.services.search import sound_categories
from bench import names_baseline, pinned, search_libraries
from bench.library_quality import (
    CACHE,
    first_relevant_ranks,
    indexed_session,
    metrics,
    random_metrics,
    renamed,
    renamed_ranks,
)

GAINS = (0.0, 0.5, 1.0, 1.5, 2.0)
TEXTS = {"name": sound_categories.category_text, "subcategories": sound_categories.category_text_with_subcategories}
MAX_LOSS = 0.01  # whole-list mAP@10 a tuning copy may lose to the categories


def copy_scores(folder: Path, model: names_baseline.MiniLM) -> dict:
    """One library copy: per gain, the fused whole-list and renamed-files mAP@10; Sound mode's; the baseline's."""
    queries = json.loads((folder / "relevance.json").read_text())["queries"]
    files = names_baseline.library_files(folder)
    sim = names_baseline.scores(model, files, [q["query"] for q in queries])  # (Q, F)
    baseline = [[files[i] for i in np.argsort(-row, kind="stable")] for row in sim]
    out: dict = {"files": len(files), "queries": len(queries), "renamed": sum(map(renamed, files)),
                 "baseline": whole_list(baseline, queries), "gains": {}}
    with indexed_session(folder) as session:
        shipped = session.rule
        out["categorised"] = len(session.library.vectors.categories_of(session.embedder.model_id))
        sound = [[h.rel_path for h in session.search(q["query"], k=len(files), mode="sound")] for q in queries]
        for (text, reading), gain in itertools.product(TEXTS.items(), GAINS):
            session.rule, session.category_text = replace(shipped, category_gain=gain), reading
            both = [[h.rel_path for h in session.search(q["query"], k=len(files), mode="both")] for q in queries]
            key = rule_key(text, gain)
            out["gains"][key] = {"whole": whole_list(both, queries)}
            if out["renamed"]:
                out["gains"][key]["renamed"] = metrics(renamed_ranks(both, queries))["mAP@10"]
        session.rule, session.category_text = shipped, sound_categories.category_text
    if out["renamed"]:
        out["sound_renamed"] = metrics(renamed_ranks(sound, queries))["mAP@10"]
        out["random_renamed"] = random_metrics([f for f in files if renamed(f)], [
            {"relevant": [f for f in q["relevant"] if renamed(f)]} for q in queries
            if any(renamed(f) for f in q["relevant"])])["mAP@10"]
    return out


def rule_key(text: str, gain: float) -> str:
    return f"{text}/{gain}"


def whole_list(orders: Sequence[Sequence[str]], queries: list[dict]) -> float:
    return metrics([first_relevant_ranks(o, set(q["relevant"])) for o, q in zip(orders, queries, strict=True)]
                   )["mAP@10"]


def choose_gain(copies: dict[str, dict]) -> str:
    """The rule above, over the given copies ({copy name: copy_scores}); mixed copies carry the renamed score.
    Ties: the smaller gain, then the plainer text."""
    off = rule_key("name", 0.0)

    def allowed(k: str) -> bool:
        return all(c["gains"][k]["whole"] >= c["gains"][off]["whole"] - MAX_LOSS for c in copies.values())

    def renamed_mean(k: str) -> float:
        return float(np.mean([c["gains"][k]["renamed"] for c in copies.values() if "renamed" in c["gains"][k]]))

    keys = [rule_key(t, g) for t in TEXTS for g in GAINS]
    return max((k for k in keys if allowed(k)), key=lambda k: (renamed_mean(k), -float(k.split("/")[1]),
                                                               -list(TEXTS).index(k.split("/")[0])))


def run(libraries: Sequence[str] | None = None) -> dict:
    model = names_baseline.MiniLM()
    names = list(libraries or search_libraries.library_names())
    data: dict[str, dict[str, dict]] = {}
    for name in names:
        built = search_libraries.build(name, CACHE / "libraries", search_libraries.cache_dir(None), mixed=True,
                                       seed=0)
        data[name] = {name: copy_scores(Path(built["folder"]), model),
                      f"{name}-mixed": copy_scores(Path(built["mixed_folder"]), model)}
        print(f"{name}: done", file=sys.stderr)
    tuning = [n for n in names if n in search_libraries.TUNING]
    out: dict = {"copies": {c: s for copies in data.values() for c, s in copies.items()}, **pinned.model_fields(
        *pinned.retrieval(None))}
    if tuning:
        chosen = choose_gain({c: s for n in tuning for c, s in data[n].items()})
        out["chosen_gain"] = chosen
        out["leave_one_out"] = {held: choose_gain({c: s for n in tuning if n != held for c, s in data[n].items()})
                                for held in tuning if len(tuning) > 1}
    out["table"] = table_lines(out["copies"], out.get("chosen_gain", rule_key("name", 1.0)))
    out["notes"] = ("unseen packages; queries and relevance committed before any system ran; the gain chosen on "
                    f"{', '.join(search_libraries.TUNING)} only; the others are held out")
    return out


def table_lines(copies: dict[str, dict], rule: str) -> list[str]:
    lines = [f"{'copy':24} {'baseline':>8} {'off':>7} {rule:>8}   renamed: {'random':>6} "
             f"{'sound':>6} {'off':>7} {rule:>8}"]
    for name, c in copies.items():
        g0, g = c["gains"][rule_key("name", 0.0)], c["gains"][rule]
        line = f"{name:24} {c['baseline']:8.3f} {g0['whole']:7.3f} {g['whole']:8.3f}"
        if "renamed" in g:
            line += (f"            {c['random_renamed']:6.3f} {c['sound_renamed']:6.3f} {g0['renamed']:7.3f} "
                     f"{g['renamed']:8.3f}")
        lines.append(line)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.library_categories", description=__doc__.split("\n\n")[0])
    p.add_argument("--library", action="append", help="only this library (repeatable)")
    result = run(p.parse_args(argv).library)
    print("\n".join(result["table"]), file=sys.stderr)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
