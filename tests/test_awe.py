from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from models.awe import (
    AWEConfig,
    EncoderConfig,
    MultiViewAWE,
    from_config_dict,
    multiview_loss,
    sinusoidal_positions,
    topk_hinge,
    unique_first,
)
from models.phonemes import VOCAB_SIZE, default_lexicon, encode
from training.metrics import (
    average_precision,
    cross_view_ap,
    dtw_distance,
    dtw_pairwise_ap,
    word_discrimination_ap,
)

# ------------------------------------------------------------------------------------------ model


def _tiny(**kw) -> MultiViewAWE:
    torch.manual_seed(0)
    return MultiViewAWE(AWEConfig.tiny(**kw)).eval()


def test_default_config_matches_paper() -> None:
    c = AWEConfig()
    assert (c.input_dim, c.d_model, c.d_ff, c.dropout) == (39, 256, 1024, 0.1)
    assert (c.acoustic.n_layers, c.acoustic.n_heads) == (6, 4)
    assert (c.phoneme.n_layers, c.phoneme.n_heads) == (4, 16)
    assert c.pos_base == 5000 and c.margin == 0.4 and c.vocab_size == VOCAB_SIZE
    with pytest.raises(ValueError):
        AWEConfig(phoneme_pooling="max")
    with pytest.raises(ValueError):
        AWEConfig(objectives=("obj9",))


def test_sinusoidal_positions_base_5000() -> None:
    table = sinusoidal_positions(50, 8, base=5000.0)
    for pos in (0, 1, 17, 49):
        for i in range(4):
            angle = pos / 5000.0 ** (2 * i / 8)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


@pytest.mark.parametrize("encoder", ["transformer", "gru"])
def test_acoustic_shapes_and_padding_invariance(encoder: str) -> None:
    model = _tiny(acoustic_encoder=encoder)
    assert hasattr(model, "acoustic_rnn") == (encoder == "gru") != hasattr(model, "acoustic")
    torch.manual_seed(1)
    a, b = torch.randn(7, 39), torch.randn(12, 39)
    alone = model.embed_acoustic(a[None], torch.tensor([7]))  # (1, D)
    batch = torch.full((2, 12, 39), 1e3)  # garbage in the padding must not leak in
    batch[0, :7], batch[1] = a, b
    both = model.embed_acoustic(batch, torch.tensor([7, 12]))
    assert both.shape == (2, 32)
    assert torch.allclose(both.norm(dim=-1), torch.ones(2), atol=1e-5)
    assert torch.allclose(both[0], alone[0], atol=1e-5)
    assert not torch.allclose(both[0], both[1], atol=1e-3)
    with torch.inference_mode():  # PyTorch's fused inference path must agree too
        fast = model.embed_acoustic(batch, torch.tensor([7, 12]))
    assert torch.allclose(fast, both, atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_phoneme_shapes_and_padding_invariance(pooling) -> None:
    model = _tiny(phoneme_pooling=pooling)
    seven = torch.tensor(encode(default_lexicon().phonemes("seven")))  # 5 ids
    zero = torch.tensor(encode(default_lexicon().phonemes("zero")))  # 4 ids
    alone = model.embed_phonemes(zero[None], torch.tensor([4]))
    ids = torch.zeros(2, 9, dtype=torch.long)
    ids[0, :5], ids[1, :4] = seven, zero
    ids[1, 4:] = 7  # non-pad ids in the padding: only the lengths may decide
    both = model.embed_phonemes(ids, torch.tensor([5, 4]))
    assert both.shape == (2, 32)
    assert torch.allclose(both[1], alone[0], atol=1e-5)
    assert hasattr(model, "first_token") == (pooling == "first")


def test_bad_lengths_are_refused() -> None:
    model = _tiny()
    with pytest.raises(ValueError):
        model.embed_acoustic(torch.randn(2, 5, 39), torch.tensor([5, 0]))
    with pytest.raises(ValueError):
        model.embed_acoustic(torch.randn(2, 5, 39), torch.tensor([5, 6]))
    with pytest.raises(ValueError, match="max_len"):
        _tiny(max_len=8).embed_acoustic(torch.randn(1, 9, 39), torch.tensor([9]))


def test_unique_first() -> None:
    words, first, inv = unique_first(torch.tensor([3, 1, 3, 2, 1]))
    assert words.tolist() == [1, 2, 3] and first.tolist() == [1, 3, 0] and inv.tolist() == [2, 0, 2, 1, 0]


# ------------------------------------------------------------------------------------------- loss


def _hand_example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # words A=0 (tokens x0, x2), B=1 (token x1); written cA, cB. Cosine distances (1 - cos):
    # d(x0,cA)=.2 d(x0,cB)=1  d(x1,cA)=.04 d(x1,cB)=.2  d(x2,cA)=.72 d(x2,cB)=1.6
    # d(x0,x1)=.4 d(x0,x2)=.2 d(x1,x2)=1   d(cA,cB)=.4
    x = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.8, -0.6]])
    c = torch.tensor([[0.8, 0.6], [0.0, 1.0]])
    return x, c, torch.tensor([0, 1, 0])


def test_loss_by_hand() -> None:
    x, c, inv = _hand_example()
    m = 0.4
    _, parts = multiview_loss(x, c, inv, margin=m, k=5, objectives=("obj0", "obj1", "obj2", "obj3"))
    # obj0 (x anchor, other written): x0 .4+.2-1<0 ; x1 .4+.2-.04=.56 ; x2 .4+.72-1.6<0
    assert parts["obj0"].item() == pytest.approx(0.56 / 3, abs=1e-5)
    # obj1 (c+ anchor, other written): .4+.2-.4=.2 ; .2 ; .4+.72-.4=.72
    assert parts["obj1"].item() == pytest.approx((0.2 + 0.2 + 0.72) / 3, abs=1e-5)
    # obj2 (c+ anchor, other-word tokens): cA vs x1 .56 ; cB vs x0, x2 both <0 ; cA vs x1 .4+.72-.04=1.08
    assert parts["obj2"].item() == pytest.approx((0.56 + 0.0 + 1.08) / 3, abs=1e-5)
    # obj3 (x anchor, other-word tokens; x0 and x2 share a word): x0-x1 .2 ; x1: (.2 + 0)/2 ; x2-x1 .12
    assert parts["obj3"].item() == pytest.approx((0.2 + 0.1 + 0.12) / 3, abs=1e-5)
    # k=1 keeps only the most offending negative: x1's closest other-word token is x0 (hinge .2)
    _, parts1 = multiview_loss(x, c, inv, margin=m, k=1, objectives=("obj3",))
    assert parts1["obj3"].item() == pytest.approx((0.2 + 0.2 + 0.12) / 3, abs=1e-5)
    # distances are cosine: scaling the vectors changes nothing
    _, scaled = multiview_loss(3 * x, 0.5 * c, inv, margin=m, k=5, objectives=("obj0",))
    assert scaled["obj0"].item() == pytest.approx(parts["obj0"].item(), abs=1e-5)


def test_loss_without_negatives_is_zero_with_grad() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    c = torch.randn(1, 4, requires_grad=True)
    loss, parts = multiview_loss(x, c, torch.zeros(3, dtype=torch.long), objectives=("obj0", "obj2"))
    assert loss.item() == 0.0 and set(parts) == {"obj0", "obj2"}
    loss.backward()  # must not raise


def test_topk_hinge_ignores_invalid_negatives() -> None:
    pos = torch.tensor([0.5])
    neg = torch.tensor([[0.0, 0.3, 2.0]])
    valid = torch.tensor([[False, True, True]])  # the closest one is the same word
    assert topk_hinge(pos, neg, valid, 0.4, 1).item() == pytest.approx(0.6)
    assert topk_hinge(pos, neg, valid, 0.4, 5).item() == pytest.approx(0.3)  # (0.6 + 0) / 2 valid


def test_forward_loss_is_finite_and_parts_add_up() -> None:
    model = _tiny(objectives=("obj0", "obj1", "obj2", "obj3")).train()
    torch.manual_seed(2)
    feats = torch.randn(4, 10, 39)
    ids = torch.tensor([[30, 14, 40, 6], [30, 14, 40, 6], [42, 20, 31, 0], [24, 29, 0, 0]])
    loss, parts = model(feats, torch.tensor([10, 8, 6, 9]), ids, torch.tensor([4, 4, 3, 2]), torch.tensor([5, 5, 9, 2]))
    assert torch.isfinite(loss) and loss.item() > 0
    assert set(parts) == {"obj0", "obj1", "obj2", "obj3"}
    assert loss.item() == pytest.approx(sum(p.item() for p in parts.values()), rel=1e-6)
    loss.backward()
    assert model.input_proj.weight.grad is not None and model.phoneme_emb.weight.grad is not None


def test_from_config_dict_round_trip(tmp_path) -> None:
    from core.checkpoints import load_model, save_checkpoint

    model = _tiny(phoneme_pooling="first", objectives=("obj0", "obj1"))
    d = dataclasses.asdict(model.config)
    rebuilt = from_config_dict(d)
    assert rebuilt.config == model.config
    assert isinstance(rebuilt.config.acoustic, EncoderConfig)
    path = save_checkpoint(tmp_path / "awe.safetensors", "words", model, model.config)
    loaded, ckpt = load_model(path, kind="words")
    assert loaded.config == model.config and ckpt.kind == "words"
    feats, lengths = torch.randn(1, 6, 39), torch.tensor([6])
    assert torch.allclose(loaded.embed_acoustic(feats, lengths), model.embed_acoustic(feats, lengths))
    with pytest.raises(ValueError, match="unknown"):
        from_config_dict({**d, "bogus": 1})
    old = {k: v for k, v in d.items() if k not in ("acoustic_encoder", "gru_layers")}
    assert from_config_dict(old).config.acoustic_encoder == "transformer"  # checkpoints from before the option
    gru = _tiny(acoustic_encoder="gru", gru_layers=1, input_dim=96)
    path = save_checkpoint(tmp_path / "gru.safetensors", "words", gru, gru.config)
    loaded, _ = load_model(path, kind="words")
    feats = torch.randn(2, 6, 96)
    torch.testing.assert_close(loaded.embed_acoustic(feats, torch.tensor([6, 4])),
                               gru.embed_acoustic(feats, torch.tensor([6, 4])))
    with pytest.raises(ValueError, match="acoustic_encoder"):
        AWEConfig.tiny(acoustic_encoder="lstm")


# --------------------------------------------------------------------------------- training on FSDD

WORDS = ["zero", "one", "six", "eight"]
SPEAKERS = ["george", "jackson", "nicolas"]


def _mfcc_batch(root: Path, rows: list[dict[str, str]]) -> tuple[torch.Tensor, ...]:
    import soundfile as sf
    import torchaudio

    mfcc = torchaudio.transforms.MFCC(
        16000, 13, melkwargs=dict(n_fft=400, win_length=400, hop_length=160, n_mels=40)
    )  # 25 ms window, 10 ms hop at 16 kHz
    resample = torchaudio.transforms.Resample(8000, 16000)
    feats, phones = [], []
    for r in rows:
        wave, sr = sf.read(root / r["path"], dtype="float32")
        assert sr == 8000
        m = mfcc(resample(torch.from_numpy(wave)))  # (13, T)
        d = torchaudio.functional.compute_deltas(m)
        feats.append(torch.cat([m, d, torchaudio.functional.compute_deltas(d)]).T)  # (T, 39)
        phones.append(torch.tensor(encode(default_lexicon().phonemes(r["word"]))))
    pad = torch.nn.utils.rnn.pad_sequence
    return (
        pad(feats, batch_first=True), torch.tensor([len(f) for f in feats]),
        pad(phones, batch_first=True), torch.tensor([len(p) for p in phones]),
        torch.tensor([WORDS.index(r["word"]) for r in rows]),
    )  # fmt: skip


def test_training_lowers_loss_and_raises_ap(fsdd) -> None:
    with open(fsdd / "metadata.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["word"] in WORDS and r["speaker"] in SPEAKERS]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # oversubscribed OpenMP threads are several times slower on a busy 2-core box
    try:
        train = _mfcc_batch(fsdd, [r for r in rows if 10 <= int(r["index"]) < 15])  # 60 tokens
        held = _mfcc_batch(fsdd, [r for r in rows if int(r["index"]) < 3])  # 36 unseen tokens
        torch.manual_seed(0)
        model = MultiViewAWE(AWEConfig.tiny())
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)

        def ap(batch: tuple[torch.Tensor, ...]) -> float:
            model.eval()
            with torch.no_grad():
                emb = model.embed_acoustic(batch[0], batch[1]).numpy()
            model.train()
            return word_discrimination_ap(emb, batch[4].numpy())

        ap_before, held_before = ap(train), ap(held)
        losses = []
        for _ in range(30):
            loss, _ = model(*train)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        ap_after, held_after = ap(train), ap(held)
    finally:
        torch.set_num_threads(threads)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert ap_after > ap_before + 0.2
    assert held_after > held_before + 0.1  # it generalises to unseen tokens, not only memorises


# ----------------------------------------------------------------------------------------- metrics


def test_average_precision_by_hand() -> None:
    # ranking: + - + -  -> precision at the positives 1/1 and 2/3
    assert average_precision(np.array([0.9, 0.8, 0.7, 0.6]), np.array([1, 0, 1, 0])) == pytest.approx((1 + 2 / 3) / 2)
    # order of the input does not matter, only the scores
    assert average_precision(np.array([0.6, 0.7, 0.8, 0.9]), np.array([0, 1, 0, 1])) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision(np.array([3.0, 2.0, 1.0]), np.array([0, 0, 1])) == pytest.approx(1 / 3)


def test_average_precision_ties() -> None:
    # a tie between one positive and one negative at the top counts as one threshold: precision 1/2
    assert average_precision(np.array([1.0, 1.0, 0.0]), np.array([1, 0, 0])) == pytest.approx(0.5)
    assert average_precision(np.array([1.0, 1.0, 0.0]), np.array([0, 1, 0])) == pytest.approx(0.5)
    # all scores equal: AP = fraction of positives
    assert average_precision(np.zeros(5), np.array([1, 0, 1, 0, 0])) == pytest.approx(0.4)
    # tied positives only: no penalty
    assert average_precision(np.array([2.0, 2.0, 1.0]), np.array([1, 1, 0])) == pytest.approx(1.0)


def test_average_precision_edge_cases() -> None:
    assert average_precision(np.array([0.3, 0.1, 0.2]), np.ones(3)) == 1.0
    assert math.isnan(average_precision(np.array([0.3, 0.1]), np.zeros(2)))
    assert math.isnan(average_precision(np.zeros(0), np.zeros(0)))
    with pytest.raises(ValueError):
        average_precision(np.ones(3), np.ones(2))


def test_average_precision_matches_sklearn() -> None:
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for _ in range(5):
        scores = rng.integers(0, 6, 200).astype(float)  # many ties
        labels = rng.random(200) < 0.3
        assert average_precision(scores, labels) == pytest.approx(
            sklearn_metrics.average_precision_score(labels, scores)
        )


def test_word_discrimination_ap() -> None:
    e = np.array([[1.0, 0.0], [2.0, 0.1], [0.0, 1.0], [0.1, 3.0]])
    assert word_discrimination_ap(e, ["a", "a", "b", "b"]) == pytest.approx(1.0)
    # pairs by similarity: (0,1) .999 (2,3) .998 [positives here], then (1,3), (1,2), (0,3), (0,2)
    assert word_discrimination_ap(e, ["a", "b", "a", "b"]) < 0.7
    # with labels a,b,b,a the positive pairs (0,3) and (1,2) rank 4th and 5th of 6 -> (1/4 + 2/5) / 2
    assert word_discrimination_ap(e, ["a", "b", "b", "a"]) == pytest.approx((1 / 4 + 2 / 5) / 2)


def test_cross_view_ap() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1]])
    w = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])  # the repeated "x" is counted once
    assert cross_view_ap(a, ["x", "y", "x"], w, ["x", "y", "x"]) == pytest.approx(1.0)
    # swap the labels of the written words: every match now ranks below the mismatches
    ap = cross_view_ap(a, ["x", "y", "x"], w[:2], ["y", "x"])
    # sims: a0 (1 vs y, 0 vs x), a1 (0, 1), a2 (.994, .110): ranked 1, 1, .994 (neg) then .110, 0, 0 (pos)
    # positives at ranks 4, and the 0-tie of ranks 5-6: thresholds give (1/4)*(1/3) + (3/6)*(2/3)
    assert ap == pytest.approx(1 / 12 + 1 / 3)


def _naive_dtw(a: np.ndarray, b: np.ndarray) -> float:
    # textbook recursion on cost and path length, written independently of the vectorised version
    def cost(i: int, j: int) -> float:
        return 1 - a[i] @ b[j] / (np.linalg.norm(a[i]) * np.linalg.norm(b[j]))

    n, m = len(a), len(b)
    D = [[(math.inf, 0)] * m for _ in range(n)]
    for i in range(n):
        for j in range(m):
            if i == 0 and j == 0:
                D[i][j] = (cost(0, 0), 1)
                continue
            prev = [D[i - 1][j - 1] if i and j else (math.inf, 0), D[i - 1][j] if i else (math.inf, 0),
                    D[i][j - 1] if j else (math.inf, 0)]  # fmt: skip
            best = min(prev, key=lambda t: t[0])
            D[i][j] = (best[0] + cost(i, j), best[1] + 1)
    return D[-1][-1][0] / D[-1][-1][1]


def test_dtw_by_hand() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    b = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert dtw_distance(a, b) == pytest.approx(0.0)  # a stretched copy aligns at no cost
    # a = [e1, e2], c = [e1, (e1+e2)/√2, e2]: best path (0,0) (0,1) (1,2) or (0,0) (1,1) (1,2),
    # cost 0 + (1 - 1/√2) + 0 over 3 steps
    c = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    assert dtw_distance(a, c) == pytest.approx((1 - 1 / math.sqrt(2)) / 3)
    # single frames: plain cosine distance
    assert dtw_distance(np.array([[1.0, 0.0]]), np.array([[-1.0, 0.0]])) == pytest.approx(2.0)
    assert dtw_distance(a, c) == pytest.approx(dtw_distance(c, a))


def test_dtw_matches_naive_reference() -> None:
    rng = np.random.default_rng(1)
    for n, m in [(1, 4), (5, 3), (9, 12), (20, 7)]:
        a, b = rng.standard_normal((n, 6)), rng.standard_normal((m, 6))
        assert dtw_distance(a, b) == pytest.approx(_naive_dtw(a, b), abs=1e-9)


def test_dtw_pairwise_ap() -> None:
    rng = np.random.default_rng(2)
    proto = {"a": rng.standard_normal((6, 5)), "b": rng.standard_normal((6, 5))}
    feats, words = [], []
    for w in ["a", "b", "a", "b"]:
        stretch = np.repeat(proto[w], rng.integers(1, 3, 6), axis=0)  # time-warped copies
        feats.append(stretch + 0.05 * rng.standard_normal(stretch.shape))
        words.append(w)
    assert dtw_pairwise_ap(feats, words) == pytest.approx(1.0)
