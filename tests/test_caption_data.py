"""Caption data readers (caption folder, Clotho, AudioCaps, WavCaps), decoding, crops, padding, caption swaps."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from training.caption_data import (
    CaptionAugmenter,
    SkipReport,
    collate_pairs,
    load_audio,
    load_caption_dataset,
    load_items_audio,
    load_paraphrases,
    pad_batch,
    pair_batches,
    random_crop,
    read_audiocaps,
    read_caption_folder,
    read_clotho,
    read_wavcaps,
)


def write_wav(path: Path, seconds: float = 0.1, sr: int = 16000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, (np.random.default_rng(0).standard_normal(int(seconds * sr)) * 0.1).astype(np.float32), sr)
    return path


def test_caption_folder_with_extra_captions_split_and_unknown_columns(tmp_path: Path) -> None:
    write_wav(tmp_path / "a.wav")
    write_wav(tmp_path / "sub" / "b.wav")
    (tmp_path / "captions.csv").write_text(
        "path,caption,license,caption_2,split,caption_3\n"
        "a.wav,a dog barks,CC0,a hound barks,train,\n"
        "sub/b.wav,rain falls,GPL,,val,water drips\n"
    )
    items = read_caption_folder(tmp_path)
    assert [i.path for i in items] == [tmp_path / "a.wav", tmp_path / "sub" / "b.wav"]
    assert items[0].captions == ["a dog barks", "a hound barks"] and items[0].split == "train"
    assert items[1].captions == ["rain falls", "water drips"] and items[1].split == "val"
    assert [i.path.name for i in read_caption_folder(tmp_path, "val")] == ["b.wav"]
    assert [i.path.name for i in load_caption_dataset(tmp_path, "train")] == ["a.wav"]


def test_clotho_layout(tmp_path: Path) -> None:
    write_wav(tmp_path / "evaluation" / "x y.wav")
    header = "file_name," + ",".join(f"caption_{i}" for i in range(1, 6))
    (tmp_path / "clotho_captions_evaluation.csv").write_text(f'{header}\n"x y.wav",c1,c2,c3,c4,c5\n')
    items = read_clotho(tmp_path, "evaluation")
    assert len(items) == 1 and items[0].captions == ["c1", "c2", "c3", "c4", "c5"]
    assert items[0].path == tmp_path / "evaluation" / "x y.wav" and items[0].path.is_file()
    assert load_caption_dataset(tmp_path, "evaluation")[0].captions[4] == "c5"


def test_audiocaps_groups_by_youtube_id_and_finds_audio(tmp_path: Path) -> None:
    write_wav(tmp_path / "val" / "yt1.wav")
    write_wav(tmp_path / "audio" / "val" / "yt2_30.flac")
    write_wav(tmp_path / "audio" / "103.wav")
    (tmp_path / "val.csv").write_text(
        "audiocap_id,youtube_id,start_time,caption\n"
        "101,yt1,0,a car passes\n"
        "102,yt1,0,a vehicle drives by\n"
        "105,yt2,30,birds sing\n"
        "103,yt3,10,a man speaks\n"
        "104,gone,0,no audio here\n"
    )
    items, missing = read_audiocaps(tmp_path / "val.csv")
    assert missing == 1
    by_name = {i.path.name: i for i in items}
    assert by_name["yt1.wav"].captions == ["a car passes", "a vehicle drives by"]
    assert by_name["yt2_30.flac"].captions == ["birds sing"] and by_name["103.wav"].split == "val"
    assert len(load_caption_dataset(tmp_path, "val")) == 3


def test_wavcaps_json(tmp_path: Path) -> None:
    write_wav(tmp_path / "audio" / "Y1.flac")
    write_wav(tmp_path / "audio" / "s2.wav")
    (tmp_path / "bbc.json").write_text(json.dumps({"num_captions_per_audio": 1, "data": [
        {"id": "Y1", "caption": "thunder rumbles", "duration": 3.0},
        {"id": "x", "audio": "s2.wav", "caption": "a door creaks"},
        {"id": "no caption"},
    ]}))
    items = read_wavcaps(tmp_path / "bbc.json", tmp_path / "audio")
    assert [(i.path.name, i.captions) for i in items] == [("Y1.flac", ["thunder rumbles"]),
                                                           ("s2.wav", ["a door creaks"])]


def test_decoding_resamples_and_reports_bad_files(tmp_path: Path) -> None:
    good = write_wav(tmp_path / "good.wav", 0.5, 8000)
    (tmp_path / "bad.wav").write_bytes(b"not audio at all")
    sf.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    assert load_audio(good, 16000).shape == (8000,)
    (tmp_path / "captions.csv").write_text("path,caption\ngood.wav,g\nbad.wav,b\nempty.wav,e\nmissing.wav,m\n")
    report = SkipReport()
    kept = [i for i, _ in load_items_audio(read_caption_folder(tmp_path), 16000, report)]
    assert kept == [0] and report.count == 3
    assert "bad.wav" in report.message() and "empty.wav" in report.message()


def test_random_crop_and_padding_lengths() -> None:
    rng = random.Random(0)
    x = torch.arange(1000.0).expand(2, -1)
    for _ in range(20):
        c = random_crop(x, 300, rng)
        assert c.shape == (2, 300) and torch.equal(c[0], torch.arange(c[0, 0].item(), c[0, 0].item() + 300))
    assert random_crop(x[:, :100], 300, rng).shape == (2, 100)  # shorter clips stay whole
    assert random_crop(x[:, :100], 300, rng, multiple=16).shape == (2, 96)
    assert random_crop(x[:, :10], 300, rng, multiple=16).shape == (2, 10)
    padded, lengths = pad_batch([torch.ones(3, 5), torch.ones(3, 2)])
    assert padded.shape == (2, 3, 5) and lengths.tolist() == [5, 2]
    assert padded[1, :, 2:].abs().sum() == 0 and padded[1, :, :2].sum() == 6


def test_pair_batches_dedupe_clips() -> None:
    captions = [["a", "a2"], ["b"], ["c", "c2", "c3"]]
    batches = pair_batches(captions, 6, random.Random(0), drop_last=False)
    assert sorted(p for b in batches for p in b) == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2)]
    batch = collate_pairs(batches[0], captions)
    assert sorted(batch.clip_indices) == [0, 1, 2] and len(batch.captions) == 6
    for caption, row in zip(batch.captions, batch.audio_ids_of_captions.tolist(), strict=True):
        assert caption[0] == "abc"[batch.clip_indices[row]]


def test_caption_swap_probability_one_and_zero(tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_text("caption,paraphrase\na dog barks,a hound barks\na dog barks,dog barking\n")
    (tmp_path / "p.json").write_text(json.dumps({"rain falls": "it rains"}))
    paras = load_paraphrases(tmp_path / "p.csv")
    assert paras == {"a dog barks": ["a hound barks", "dog barking"]}
    assert load_paraphrases(tmp_path / "p.json") == {"rain falls": ["it rains"]}
    always = CaptionAugmenter(paras, p=1.0, rng=random.Random(0))
    outs = {always("a dog barks") for _ in range(50)}
    assert outs == {"a hound barks", "dog barking"}
    assert always("a cat meows") == "a cat meows"  # no paraphrase: unchanged
    never = CaptionAugmenter(paras, p=0.0, rng=random.Random(0))
    assert {never("a dog barks") for _ in range(50)} == {"a dog barks"}
    half = CaptionAugmenter(paras, p=0.5, rng=random.Random(0))
    swapped = sum(half("a dog barks") != "a dog barks" for _ in range(400))
    assert 150 < swapped < 250


def test_a_caption_row_without_an_extension_tries_only_formats_the_audio_path_reads() -> None:
    from core.audio import SUPPORTED_EXTENSIONS
    from training.caption_data import STEM_SUFFIXES

    assert set(STEM_SUFFIXES) <= SUPPORTED_EXTENSIONS
