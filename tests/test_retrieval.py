from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import torch.nn.functional as F

from models.frontends import PasstMel
from models.passt import passt_tiny
from models.retrieval import RetrievalConfig, RetrievalModel, contrastive_loss, from_config_dict
from models.text import text_tiny
from training.ranking import (
    NonFiniteError,
    caption_ranks,
    correct_from_captions,
    ensemble_similarity,
    require_finite,
    retrieval_metrics,
)


def tiny_config(**overrides: object) -> RetrievalConfig:
    kwargs: dict = dict(
        audio=passt_tiny(window_seconds=1.0, input_tdim=100), text=text_tiny(), embed_dim=16, tau=0.05
    )
    kwargs.update(overrides)
    return RetrievalConfig(**kwargs)


# ------------------------------------------------------------------------------------------ loss


def test_loss_equals_clip_loss_with_one_caption_per_clip() -> None:
    torch.manual_seed(0)
    sim = torch.randn(6, 6) * 5
    labels = torch.arange(6)
    clip = (F.cross_entropy(sim, labels) + F.cross_entropy(sim.t(), labels)) / 2
    torch.testing.assert_close(contrastive_loss(sim, labels), clip)
    # and written out by hand: -log of the diagonal's softmax, over rows and over columns
    rows = -torch.stack([sim[i, i] - torch.logsumexp(sim[i], 0) for i in range(6)]).mean()
    cols = -torch.stack([sim[i, i] - torch.logsumexp(sim[:, i], 0) for i in range(6)]).mean()
    torch.testing.assert_close(contrastive_loss(sim, labels), (rows + cols) / 2)


def test_every_caption_of_a_clip_is_a_positive() -> None:
    # 2 clips, 3 captions: captions 0 and 1 describe clip 0, caption 2 describes clip 1
    sim = torch.tensor([[2.0, 1.0, 0.0],
                        [0.5, 0.0, 3.0]])
    ids = torch.tensor([0, 0, 1])
    lse = math.log
    # text -> audio: each caption's clip among the 2 clips (columns)
    t2a = [2.0 - lse(math.exp(2.0) + math.exp(0.5)),
           1.0 - lse(math.exp(1.0) + math.exp(0.0)),
           3.0 - lse(math.exp(0.0) + math.exp(3.0))]
    # audio -> text: each positive pair among the 3 captions (rows); caption 1 is NOT a negative of clip 0
    row0 = lse(math.exp(2.0) + math.exp(1.0) + math.exp(0.0))
    row1 = lse(math.exp(0.5) + math.exp(0.0) + math.exp(3.0))
    a2t = [2.0 - row0, 1.0 - row0, 3.0 - row1]
    expected = -(sum(t2a) / 3 + sum(a2t) / 3) / 2
    assert contrastive_loss(sim, ids).item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="at least one caption"):
        contrastive_loss(sim, torch.tensor([0, 0, 0]))


# ------------------------------------------------------------------------------------------ model


def test_model_surface_shapes_norms_and_checkpoint_round_trip(tmp_path: Path) -> None:
    from core.checkpoints import config_to_dict, load_model, save_checkpoint

    torch.manual_seed(0)
    model = RetrievalModel(tiny_config()).eval()
    mel = torch.randn(3, 128, 150)
    with torch.no_grad():
        a = model.embed_audio(mel, torch.tensor([150, 80, 120]))
        t = model.embed_text(["a dog barks", "rain", "a door slams shut"])
        feats = model.audio_encoder.embed_windows(mel, torch.tensor([150, 80, 120]))
        torch.testing.assert_close(model.embed_audio_features(feats), a)
        sim = model.similarity(a, t)
    assert a.shape == (3, 16) and t.shape == (3, 16) and sim.shape == (3, 3)
    torch.testing.assert_close(a.norm(dim=-1), torch.ones(3))
    torch.testing.assert_close(sim, a @ t.t() / 0.05)

    d = json.loads(json.dumps(config_to_dict(model.config)))
    assert from_config_dict(d).config == model.config
    path = save_checkpoint(tmp_path / "r.safetensors", "retrieval", model, model.config)
    loaded, _ = load_model(path, kind="retrieval")
    with torch.no_grad():
        torch.testing.assert_close(loaded.embed_text(["a dog barks"]), t[:1])
        torch.testing.assert_close(loaded.embed_audio(mel[:1]), model.embed_audio(mel[:1]))


def test_learn_tau_makes_the_temperature_a_trainable_parameter() -> None:
    fixed = RetrievalModel(tiny_config())
    learnt = RetrievalModel(tiny_config(learn_tau=True, tau=0.1))
    assert not fixed.log_tau.requires_grad and learnt.log_tau.requires_grad
    assert learnt.tau.item() == pytest.approx(0.1)


def sfx_batch(sfx: Path, n: int = 8, seconds: float = 1.0) -> tuple[torch.Tensor, list[str]]:
    """n train clips with distinct captions, first `seconds` (zero-padded), as PaSST log-mel."""
    rows = [r for r in csv.DictReader(open(sfx / "captions.csv", encoding="utf-8")) if r["split"] == "train"]
    waves, captions = [], []
    num = int(32000 * seconds)
    for r in rows:
        if r["caption"] in captions:
            continue
        wave, sr = sf.read(sfx / r["path"], dtype="float32", always_2d=True)
        assert sr == 32000
        wave = torch.from_numpy(wave.mean(axis=1))[:num]
        waves.append(F.pad(wave, (0, num - len(wave))))
        captions.append(r["caption"])
        if len(captions) == n:
            break
    return PasstMel()(torch.stack(waves)), captions  # (n, 128, 100)


def test_loss_decreases_on_real_sound_effects(sfx: Path) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    mel, captions = sfx_batch(sfx)
    assert mel.shape == (8, 128, 100)
    # no patchout: a deterministic run; small random encoders start near collapse, so tau 0.1 and lr 1e-3
    audio = passt_tiny(window_seconds=1.0, input_tdim=100, patchout=(0, 0))
    model = RetrievalModel(tiny_config(audio=audio, tau=0.1))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def eval_loss() -> float:
        model.eval()
        with torch.no_grad():
            return model(mel, captions)[1].item()

    before = eval_loss()
    model.train()
    for _ in range(30):
        _, loss = model(mel, captions)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = eval_loss()
    assert before > 1.5  # about chance (log 8 = 2.08) at the start
    assert after < 0.85 * before, (before, after)  # seeds 0-4 give 0.58-0.77


# ------------------------------------------------------------------------------------------ metrics


def test_metrics_match_hand_computed_ranks() -> None:
    # 4 captions x 3 clips; caption_to_clip = [0, 1, 2, 0]
    sim = np.array([[0.9, 0.1, 0.2],   # clip 0 first            -> rank 1
                    [0.8, 0.3, 0.5],   # clip 1 third            -> rank 3
                    [0.4, 0.6, 0.5],   # clip 2 second           -> rank 2
                    [0.1, 0.7, 0.9]])  # clip 0 last             -> rank 3
    ranks = caption_ranks(sim, [0, 1, 2, 0])
    assert ranks.tolist() == [1, 3, 2, 3]
    m = retrieval_metrics(sim, np.array([0, 1, 2, 0]))
    assert m["R@1"] == pytest.approx(0.25)
    assert m["R@5"] == pytest.approx(1.0) and m["R@10"] == pytest.approx(1.0)
    assert m["mAP@10"] == pytest.approx((1 + 1 / 3 + 1 / 2 + 1 / 3) / 4)
    assert m["mean_rank"] == pytest.approx(2.25) and m["median_rank"] == pytest.approx(2.5)
    # rank beyond k scores 0 in mAP@k
    m2 = retrieval_metrics(sim, np.array([0, 1, 2, 0]), k=2)
    assert m2["mAP@2"] == pytest.approx((1 + 0 + 1 / 2 + 0) / 4) and m2["R@2"] == pytest.approx(0.5)


def test_metrics_ties_are_pessimistic_by_default() -> None:
    sim = np.array([[0.5, 0.5, 0.5, 0.1],   # correct clip 1 tied with clips 0 and 2
                    [0.2, 0.9, 0.2, 0.2]])  # correct clip 3 tied with clips 0 and 2, below clip 1
    assert caption_ranks(sim, [1, 3]).tolist() == [3, 4]
    assert caption_ranks(sim, [1, 3], ties="optimistic").tolist() == [1, 2]
    # a model that scores everything the same is ranked last, not first
    flat = retrieval_metrics(np.zeros((3, 5)), [0, 1, 2])
    assert flat["R@1"] == 0.0 and flat["mean_rank"] == 5.0
    with pytest.raises(ValueError, match="ties"):
        caption_ranks(sim, [1, 3], ties="random")


def test_nan_similarities_rank_last_under_either_tie_rule() -> None:
    """Issue 14 item 3: NaN similarities used to defeat the pessimistic tie rule (all-NaN scored mAP@10 = 1)."""
    nan = np.full((3, 5), np.nan)
    for ties in ("pessimistic", "optimistic"):
        m = retrieval_metrics(nan, [0, 1, 2], ties=ties)
        assert m["R@1"] == 0.0 and m["mAP@10"] == pytest.approx(1 / 5) and m["mean_rank"] == 5.0
    sim = np.array([[0.9, np.nan, 0.1],     # NaN incorrect clip does not outrank the correct one -> 1
                    [np.nan, 0.2, 0.5],     # correct clip 0 is NaN: last -> 3
                                    [0.3, np.nan, 0.2]])    # correct clip 1 is NaN: last -> 3
    assert caption_ranks(sim, [0, 0, 1]).tolist() == [1, 3, 3]
    assert caption_ranks(sim, [0, 0, 1], ties="optimistic").tolist() == [1, 3, 3]


def test_require_finite_names_the_broken_output() -> None:
    require_finite(np.ones((4, 3)), "ok")
    bad = torch.ones(4, 3)
    bad[1, 2] = float("nan")
    bad[3, 0] = float("inf")
    with pytest.raises(NonFiniteError, match=r"audio embeddings: .*NaN/Inf.* 2 of 4.*broken"):
        require_finite(bad, "audio embeddings")


def test_metrics_with_identical_captions_and_several_captions_per_clip() -> None:
    # clips 0 and 2 share the caption "a dog barks"; clip 1 has two captions
    texts = ["a dog barks", "rain falls", "Heavy rain falls", "A dog  barks"]
    caption_to_clip = [0, 1, 1, 2]
    correct = correct_from_captions(texts, caption_to_clip, n_clips=3)
    assert correct.tolist() == [[True, False, True],
                                [False, True, False],
                                [False, True, False],
                                [True, False, True]]
    sim = np.array([[0.1, 0.3, 0.9],   # its own clip is last, but clip 2 has the same caption -> rank 1
                    [0.2, 0.8, 0.1],   # rank 1
                    [0.7, 0.6, 0.1],   # rank 2
                    [0.5, 0.9, 0.4]])  # best correct is clip 0 (0.5), clip 1 above it -> rank 2
    assert caption_ranks(sim, correct).tolist() == [1, 1, 2, 2]
    assert caption_ranks(sim, caption_to_clip).tolist() == [3, 1, 2, 3]  # own clip only
    m = retrieval_metrics(torch.tensor(sim), correct)
    assert m["R@1"] == pytest.approx(0.5) and m["mAP@10"] == pytest.approx(0.75)


def test_ensemble_similarity_averages() -> None:
    a, b = np.array([[1.0, 3.0]]), np.array([[3.0, 1.0]])
    np.testing.assert_allclose(ensemble_similarity([a, b]), [[2.0, 2.0]])
    t = ensemble_similarity([torch.ones(2, 2), torch.zeros(2, 2)])
    assert isinstance(t, torch.Tensor) and torch.equal(t, torch.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="shape"):
        ensemble_similarity([a, np.zeros((2, 2))])
