"""A broken model is refused, never scored: NaN/Inf outputs raise `NonFiniteError` with a message.

Used wherever embeddings leave a model (training's metrics, the search service, the NumPy text tower); torch is
not imported here, so the search command line runs without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class NonFiniteError(ValueError):
    """A model produced NaN or infinite outputs: it is broken, and nothing it gives may be scored."""


def require_finite(x: Any, what: str) -> None:
    """Raise NonFiniteError naming `what` when `x` (array or tensor, rows = items) holds NaN or Inf."""
    a = to_numpy(x)
    finite = np.isfinite(a)
    if finite.all():
        return
    rows = int((~finite.reshape(len(a), -1)).any(axis=1).sum()) if a.ndim >= 1 and len(a) else 1
    total = len(a) if a.ndim >= 1 else 1
    raise NonFiniteError(f"{what}: the model gives non-finite (NaN/Inf) values for {rows} of {total}; "
                         "the checkpoint is broken (diverged training or damaged weights)")


def to_numpy(x: Any) -> np.ndarray:  # noqa: ANN401 - array or tensor
    if hasattr(x, "detach"):  # a torch tensor; torch itself is not imported here (the search CLI runs without it)
        x = x.detach().cpu().double().numpy()
    return np.asarray(x)
