"""`earshot eval units|words` on the speech corpus's layout (words.csv + utterances.csv, split heldout) and on
FSDD: per-speaker numbers, speaker filters, the MFCC baselines, small sets that cannot form a score."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app.cli.main import main
from core.checkpoints import save_checkpoint
from models.awe import MultiViewAWE
from models.frontends import MFCC, frontend_to_dict
from models.units import UnitsModel
from training import abx
from training.metrics import average_precision, dtw_pairwise_ap
from training.speech_eval import Selection, list_eval_clips, per_speaker_table
from training.units_train import units_config
from training.words_train import dtw_features, model_config

SPEAKERS = ("george", "jackson", "theo")
WORDS = ("zero", "one", "six", "eight")


def fsdd_file(fsdd: Path, word: str, speaker: str, index: int) -> Path:
    digit = {"zero": 0, "one": 1, "six": 6, "eight": 8}[word]
    return fsdd / "recordings" / f"{digit}_{speaker}_{index}.wav"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, fsdd: Path) -> Path:
    """The speech corpus's layout on real FSDD files: heldout = each speaker says each word ONCE (as the
    hedgewars voices do), plus a heldout utterance of another speaker (like fr_FR_f_Armelle, no words) and
    train rows that must be left out."""
    root = tmp_path_factory.mktemp("speech_corpus")
    with open(root / "words.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "word", "speaker", "split", "synthetic"])
        for s, word in itertools.product(SPEAKERS, WORDS):
            w.writerow([fsdd_file(fsdd, word, s, 0), word.capitalize(), s, "heldout", 0])
        w.writerow([fsdd_file(fsdd, "zero", "lucas", 7), "zero", "lucas", "train", 0])
    with open(root / "utterances.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "speaker", "real", "split"])
        w.writerow([fsdd_file(fsdd, "one", "george", 0), "george", 1, "heldout"])  # also a word token
        w.writerow([fsdd_file(fsdd, "six", "nicolas", 3), "nicolas", 1, "heldout"])
        w.writerow([fsdd_file(fsdd, "six", "nicolas", 4), "nicolas", 1, "train"])
    return root


@pytest.fixture(scope="module")
def units_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = UnitsModel(units_config("tiny", ["george", "lucas"])).eval()
    path = tmp_path_factory.mktemp("units") / "units.safetensors"
    save_checkpoint(path, "units", model, model.config, features=frontend_to_dict(MFCC()),
                    training={"preprocessing": {"resampler": "soxr"}})
    return path


@pytest.fixture(scope="module")
def words_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = MultiViewAWE(model_config("tiny")).eval()
    path = tmp_path_factory.mktemp("words") / "words.safetensors"
    save_checkpoint(path, "words", model, model.config, features=frontend_to_dict(MFCC()),
                    training={"preprocessing": {"resampler": "soxr"}})
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------------------------------------- data


def test_corpus_tables_split_speaker_filter_and_no_duplicates(corpus: Path) -> None:
    words, utts, has_split = list_eval_clips([corpus], Selection("heldout"))
    assert has_split and len(words) == 12 and {c.word for c in words} == set(WORDS)  # "Zero" -> "zero"
    assert [c.speaker for c in utts] == ["nicolas"]  # george's utterance is already a word token
    words, utts, _ = list_eval_clips([corpus], Selection("all", speakers=("theo",)))
    assert len(words) == 4 and not utts
    words, utts, _ = list_eval_clips([corpus], Selection("heldout", exclude_speakers=("theo", "nicolas")))
    assert {c.speaker for c in words} == {"george", "jackson"} and not utts
    # "a,b": the rows of either split (a set evaluated with the voices of another, e.g. saytime's numbers)
    either = list_eval_clips([corpus], Selection("heldout, train,"))[0]  # spaces and an empty name are dropped
    assert len(either) > len(words) and {c.split for c in either} == {"heldout", "train"}
    assert Selection(" a , b,").splits == ("a", "b") and Selection("all").splits == ()


def test_a_listed_split_with_no_rows_is_an_error_not_a_smaller_set(
        corpus: Path, units_model: Path, words_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for kind, model in (("units", units_model), ("words", words_model)):
        assert main(["eval", kind, "--model", str(model), "--data", str(corpus), "--split", "heldout,heldot",
                     "--json"]) == 2
        err = capsys.readouterr().err
        assert "no rows in split(s) heldot" in err and "splits here: heldout" in err, err
    r = run_cli(capsys, "eval", "words", "--model", str(words_model), "--data", str(corpus), "--split",
                "heldout, train", "--no-dtw", "--device", "cpu", "--json")
    assert r["tokens"] == 13  # the twelve heldout tokens and lucas's train token


def test_abx_per_speaker_and_why_no_triplet() -> None:
    # speaker a: x at 0°, y at 90°; speaker b: x at 0°, y at 30° (close to x). With X from b, "y" is nearer
    # a's x than a's y: error 1 on (y, x), 0 on (x, y); with X from a, every triplet is right
    def at(deg: float) -> np.ndarray:
        return np.array([[np.cos(np.deg2rad(deg)), np.sin(np.deg2rad(deg))]])

    items = [at(0), at(0), at(90), at(90), at(0), at(0), at(30), at(30)]
    words = ["x", "x", "y", "y", "x", "x", "y", "y"]
    speakers = ["a", "a", "a", "a", "b", "b", "b", "b"]
    across = abx.abx_scores(items, words, speakers, "across")
    assert across.per_speaker == {"a": 0.0, "b": 0.5}
    assert across.error == pytest.approx(abx.abx_error(items, words, speakers, "across")) == 0.25
    assert across.triplets == sum(across.per_speaker_triplets.values()) == 2 * 2 * (2 * 2 * 2)
    within = abx.abx_scores(items, words, speakers, "within")
    assert within.per_speaker == {"a": 0.0, "b": 0.0} and within.reason is None
    x, y = at(0), at(90)
    once = abx.abx_scores([x, y, x, y], ["x", "y", "x", "y"], ["a", "a", "b", "b"], "within")
    assert np.isnan(once.error) and "2 tokens of one word" in once.reason and once.triplets == 0
    alone = abx.abx_scores([x, y], ["x", "y"], ["a", "a"], "across")
    assert np.isnan(alone.error) and ">= 2 speakers" in alone.reason
    disjoint = abx.abx_scores([x, y, x, y], ["x", "y", "u", "v"], ["a", "a", "b", "b"], "across")
    assert np.isnan(disjoint.error) and "shares" in disjoint.reason


# ---------------------------------------------------------------------------------------------- units


def test_units_heldout_one_token_per_word_gives_across_per_speaker_and_explains_within(
        corpus: Path, units_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = run_cli(capsys, "eval", "units", "--model", str(units_model), "--data", str(corpus), "--split", "heldout",
                "--resynth-items", "2", "--json")
    assert r["items"] == 12 and r["utterances"] == 13 and r["split"] == "heldout"
    assert r["abx_within"] is None and r["mfcc_abx_within"] is None  # no speaker says a word twice
    assert any("abx_within" in n and "2 tokens" in n for n in r["notes"])
    for key in ("abx_across", "mfcc_abx_across"):
        assert 0.0 <= r[key] <= 1.0
    assert r["abx_across_triplets"] == 3 * 2 * 4 * 3  # X speaker x other speaker x word_A x word_B
    per = r["per_speaker"]
    assert set(per) == {"george", "jackson", "theo", "nicolas"}
    assert per["nicolas"]["items"] == 0 and per["nicolas"]["utterances"] == 1 and per["nicolas"]["abx_across"] is None
    assert per["george"]["seen"] is True and per["theo"]["seen"] is False
    for s in SPEAKERS:
        assert 0.0 <= per[s]["mfcc_abx_across"] <= 1.0 and per[s]["bitrate_bps"] >= 0.0
    # the whole is the average over word pairs of the cells of every X speaker: the per-speaker numbers
    # average to it when every speaker has the same cells
    assert r["mfcc_abx_across"] == pytest.approx(np.mean([per[s]["mfcc_abx_across"] for s in SPEAKERS]))

    assert main(["eval", "units", "--model", str(units_model), "--data", str(corpus), "--split", "heldout",
                 "--resynth-items", "1", "--no-baseline"]) == 0
    text = capsys.readouterr().out
    assert "per speaker:" in text and "note: abx_within" in text
    row = next(line for line in text.splitlines() if line.startswith("nicolas"))
    assert "—" in row  # no word tokens: no ABX for that speaker


def test_units_fsdd_single_speaker_and_nothing_left(fsdd: Path, units_model: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # FSDD's own metadata.csv: speaker theo alone, test split, two digits' worth of rows at most per cell
    r = run_cli(capsys, "eval", "units", "--model", str(units_model), "--data", str(fsdd), "--split", "test",
                "--speaker", "theo", "--max-per-cell", "2", "--resynth-items", "1", "--no-baseline", "--json")
    assert r["speakers"] == ["theo"] and r["items"] == 50 and list(r["per_speaker"]) == ["theo"]
    assert 0.0 <= r["abx_within"] <= 1.0 and r["abx_across"] is None
    assert any(">= 2 speakers" in n for n in r["notes"])
    assert main(["eval", "units", "--model", str(units_model), "--data", str(fsdd), "--speaker", "nobody"]) == 2
    err = capsys.readouterr().err
    assert "no audio found" in err and "speaker(s) nobody" in err
    assert "splits here: test (300 rows), train (2700 rows)" in err
    assert main(["eval", "units", "--model", str(units_model), "--data", str(fsdd), "--split", "heldout"]) == 2
    assert "splits here: test (300 rows), train (2700 rows)" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- words


def test_words_heldout_per_speaker_ap_uses_the_pairs_of_that_speaker(
        corpus: Path, words_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = run_cli(capsys, "eval", "words", "--model", str(words_model), "--data", str(corpus), "--split", "heldout",
                "--device", "cpu", "--json")
    assert r["tokens"] == 12 and r["speakers"] == 3 and r["pairs"] == 66 and r["positive_pairs"] == 4 * 3
    per = r["per_speaker"]
    assert set(per) == set(SPEAKERS) and all(per[s]["positive_pairs"] == 8 for s in SPEAKERS)
    for s in SPEAKERS:
        for key in ("ap", "cross_view_ap", "dtw_ap"):
            assert 0.0 < per[s][key] <= 1.0, (s, key)
    # the DTW baseline is the same code as training.metrics.dtw_pairwise_ap, overall and on a speaker's pairs
    from app.services.jobs import drain
    from training.words_data import load_words
    from training.words_train import MFCC as WordsMFCC
    from training.words_train import TrimConfig

    data = drain(load_words([corpus], WordsMFCC(), ("heldout",), TrimConfig(), 300))
    feats = [dtw_features(t.feats) for t in data.tokens]
    labels = [t.word for t in data.tokens]
    assert r["dtw_ap"] == pytest.approx(dtw_pairwise_ap(feats, labels))
    from training.metrics import dtw_distance

    spk = [t.speaker for t in data.tokens]
    pairs = [(i, j) for i, j in itertools.combinations(range(len(feats)), 2) if "theo" in (spk[i], spk[j])]
    scores = np.array([-dtw_distance(feats[i], feats[j]) for i, j in pairs])
    same = np.array([labels[i] == labels[j] for i, j in pairs])
    assert per["theo"]["dtw_ap"] == pytest.approx(average_precision(scores, same))


def test_words_speaker_filter_and_too_few_words(fsdd: Path, corpus: Path, words_model: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    r = run_cli(capsys, "eval", "words", "--model", str(words_model), "--data", str(corpus), "--split", "heldout",
                "--exclude-speaker", "theo", "--no-dtw", "--device", "cpu", "--json")
    assert r["tokens"] == 8 and set(r["per_speaker"]) == {"george", "jackson"} and "dtw_ap" not in r
    r = run_cli(capsys, "eval", "words", "--model", str(words_model), "--data", str(fsdd), "--split", "test",
                "--speaker", "theo", "--no-dtw", "--device", "cpu", "--json")
    assert r["tokens"] == 50 and r["speakers"] == 1 and list(r["per_speaker"]) == ["theo"]
    one = corpus.parent / "one_word"
    one.mkdir(exist_ok=True)
    with open(corpus / "words.csv", newline="") as f, open(one / "words.csv", "w", newline="") as g:
        rows = [row for row in csv.DictReader(f) if row["word"] == "Zero"]
        w = csv.DictWriter(g, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert main(["eval", "words", "--model", str(words_model), "--data", str(one), "--split", "heldout",
                 "--device", "cpu"]) == 2
    assert "fewer than two different words" in capsys.readouterr().err
    assert main(["eval", "words", "--model", str(words_model), "--data", str(corpus), "--split", "heldout",
                 "--speaker", "nobody", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "no rows" in err and "speaker(s) nobody" in err and "splits here: heldout (13 rows), train (2 rows)" in err


def test_words_of_another_language_get_ap_and_no_cross_view(corpus: Path, words_model: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Words with no pronunciation (Mandarin syllables in bopomofo) keep their tokens for the acoustic AP and
    the DTW baseline; cross-view AP covers the spelled words alone, and is None (said) when there are none."""
    foreign = {"Zero": "ㄅㄚ", "One": "ㄇㄚ", "Six": "ㄓ", "Eight": "ㄚ"}
    cross = {}
    for name, keep in (("all_foreign", set(foreign)), ("half_foreign", {"Zero", "One"}), ("spelled_only", set())):
        root = corpus.parent / name
        root.mkdir(exist_ok=True)
        with open(corpus / "words.csv", newline="", encoding="utf-8") as f, \
                open(root / "words.csv", "w", newline="", encoding="utf-8") as g:
            rows = [dict(row, word=foreign[row["word"]] if row["word"] in keep else row["word"])
                    for row in csv.DictReader(f) if row["split"] == "heldout"
                    and (name != "spelled_only" or row["word"] in ("Six", "Eight"))]
            w = csv.DictWriter(g, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        r = run_cli(capsys, "eval", "words", "--model", str(words_model), "--data", str(root), "--split", "heldout",
                    "--device", "cpu", "--json")
        cross[name] = r["cross_view_ap"]
        if name == "spelled_only":
            continue
        assert r["tokens"] == 12 and r["words"] == 4 and r["positive_pairs"] == 12 and 0 < r["dtw_ap"] <= 1
        assert 0 < r["ap"] <= 1 and not r["problems"].get("not_in_dictionary")
        if name == "all_foreign":
            assert r["cross_view_ap"] is None and any("no word of the set has a pronunciation" in n
                                                      for n in r["notes"])
            assert r["unspelled_words"] == 4 and all(v["cross_view_ap"] is None for v in r["per_speaker"].values())
        else:
            assert 0 < r["cross_view_ap"] <= 1 and all(0 < v["cross_view_ap"] <= 1 for v in r["per_speaker"].values())
            assert r["unspelled_words"] == 2 and any("over the 2 words with a pronunciation" in n for n in r["notes"])
    # cross-view of the spelled words alone: the unspelled words' tokens add no negatives to it
    assert cross["half_foreign"] == pytest.approx(cross["spelled_only"])


def test_per_speaker_table_shows_missing_scores_as_dashes() -> None:
    text = per_speaker_table({"a": {"ap": 0.5, "tokens": 3}, "bb": {"ap": None, "tokens": 1, "lsd": float("nan")}})
    lines = text.splitlines()
    assert lines[0].split() == ["speaker", "ap", "tokens", "lsd"]
    assert lines[1].split() == ["a", "0.5000", "3", "—"] and lines[2].split() == ["bb", "—", "1", "—"]


def test_envelope_correlation_flags_a_resynthesis_smeared_in_time() -> None:
    """The LSD compares average spectra, so a resynthesis whose energy no longer rises and falls with the words
    (a smear) can score close to a good one; the envelope correlation cannot be fooled that way."""
    import torch

    from training.speech_eval import envelope_correlation, log_spectral_distance

    t = torch.arange(60, dtype=torch.float32)
    syllables = 0.05 + torch.relu(torch.sin(t / 4)) ** 2  # (T,) energy rising and falling
    shape = torch.linspace(1.0, 0.2, 40)  # (F,) a spectral tilt
    target = syllables[:, None] * shape[None, :]  # (T, F) magnitudes
    assert envelope_correlation(target, target, 30) == pytest.approx(1.0)
    assert envelope_correlation(0.3 * target, target, 30) == pytest.approx(1.0)  # a level change is not a smear
    smear = target.mean(dim=0, keepdim=True).expand_as(target)  # every frame the average frame
    assert envelope_correlation(smear, target, 30) == 0.0
    shifted = torch.roll(target, 12, dims=0)  # energy at the wrong times
    assert envelope_correlation(shifted, target, 30) < 0.0
    assert log_spectral_distance(smear, target, 30) < log_spectral_distance(shifted, target, 30)  # the LSD prefers it
