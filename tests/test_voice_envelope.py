"""core/voices.py envelope_correction: one smooth per-utterance curve from a table voice's spectrum to the
speaker's, and the Units session applying it to the Auto voice only."""

from __future__ import annotations

import numpy as np
import torch

from core.voices import EnvelopeConfig, envelope_correction

F, T, MAX_BIN = 257, 120, 129


def speechlike(seed: int = 0) -> torch.Tensor:
    """(T, F) magnitudes: harmonic-ish rows under a falling envelope, loud and quiet frames."""
    g = torch.Generator().manual_seed(seed)
    freqs = torch.arange(F, dtype=torch.float64)
    envelope = torch.exp(-freqs / 60)  # a falling tilt
    rows = envelope[None] * (0.5 + torch.rand(T, F, generator=g, dtype=torch.float64))
    level = torch.where(torch.arange(T) % 30 < 20, 1.0, 1e-4)[:, None]  # speech, then a pause
    return (rows * level).float()


def test_a_smooth_difference_of_timbre_is_undone_and_the_level_does_not_matter() -> None:
    target = speechlike()
    tilt = torch.exp(torch.linspace(0.0, 1.5, F))  # the table voice: +13 dB more treble
    pred = 0.01 * target * tilt[None]  # and 40 dB quieter (the level is core/level_match.py's job)
    gain = envelope_correction(pred, target, MAX_BIN)
    corrected = pred * gain[None]
    # what is left is a constant (the level): the ratio is flat across frequency to a fraction of a dB
    ratio_db = 20 * torch.log10(corrected[:20].mean(0) / target[:20].mean(0))
    assert float(ratio_db.max() - ratio_db.min()) < 1.0
    assert float(20 * torch.log10(gain[-1] / gain[0])) < -12  # it took the treble back down
    assert float(20 * torch.log10(gain[:MAX_BIN]).mean().abs()) < 0.5  # and left the level alone
    other = speechlike(1) * tilt[None]  # other per-bin detail: the curve copies none of it
    gain_db = 20 * torch.log10(envelope_correction(other, target, MAX_BIN))
    assert float(gain_db[1:].sub(gain_db[:-1]).abs().max()) < 0.5


def test_the_curve_is_clamped_and_ones_without_speech() -> None:
    target = speechlike()
    pred = speechlike(1)
    pred[:, 100:] *= 1e-4  # the voice has nothing above 3 kHz: never lifted by more than max_db
    gain_db = 20 * torch.log10(envelope_correction(pred, target, MAX_BIN))
    assert float(gain_db.abs().max()) <= EnvelopeConfig().max_db + 1e-4
    assert float(gain_db[110:].min()) > 5 and float(gain_db[:90].max()) < 0  # lifted where the voice lacks it
    silent = torch.zeros(T, F)
    assert torch.equal(envelope_correction(pred, silent, MAX_BIN), torch.ones(F))
    assert torch.equal(envelope_correction(pred[:0], target[:0], MAX_BIN), torch.ones(F))


def test_the_session_corrects_the_fitted_voice_but_not_one_the_user_picked(fsdd) -> None:  # noqa: ANN001
    from app.services.jobs import drain
    from app.services.units.units_session import UnitsSession
    from tests.test_units_service import VOICES, fsdd_speech, tiny_units_model

    session = UnitsSession(tiny_units_model(3, VOICES))
    audio = fsdd_speech(fsdd, 3)
    session.feed(audio)
    session.finish()
    fit = session.fit_voice()
    assert fit is not None and fit.envelope is not None and fit.envelope.shape == (F,)
    assert not torch.allclose(fit.envelope, torch.ones(F))  # an untrained voice is far from the speaker's
    results = {}
    for speaker, correct in ((None, True), (None, False), (fit.name, True)):
        torch.manual_seed(0)
        results[speaker, correct] = drain(session.resynthesize_job(speaker, n_iter=4, correct_envelope=correct))
    assert results[None, True].envelope and not results[None, False].envelope
    assert not results[fit.name, True].envelope  # picked by name: its own timbre
    np.testing.assert_array_equal(results[None, False].audio, results[fit.name, True].audio)
    assert not np.allclose(results[None, True].audio, results[None, False].audio)
