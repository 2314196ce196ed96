"""torch and faiss in one process (an OpenMP clash breaks this on some platforms)."""

from __future__ import annotations

import numpy as np


def test_torch_and_faiss_together() -> None:
    import faiss
    import torch

    torch.manual_seed(0)
    vectors = torch.nn.functional.normalize(torch.randn(500, 64), dim=1)
    index = faiss.IndexFlatIP(64)
    index.add(vectors.numpy().astype(np.float32))
    query = vectors[:5] + 0.01 * torch.randn(5, 64)
    scores, ids = index.search(torch.nn.functional.normalize(query, dim=1).numpy(), 3)
    assert ids[:, 0].tolist() == [0, 1, 2, 3, 4]
    expected = (torch.nn.functional.normalize(query, dim=1) @ vectors.T).topk(3).values.numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-5)
    # and torch still works after faiss ran its OpenMP threads
    assert torch.matmul(torch.ones(2, 2), torch.ones(2, 2)).sum().item() == 8.0
