"""Search over a sound library (no Qt): query, candidates, fusion, one SearchAnswer, one job per module."""
