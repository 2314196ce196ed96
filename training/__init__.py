"""Datasets, training loops, metrics, checkpoints, distributed launch. No Qt."""
