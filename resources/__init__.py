"""Data shipped with Earshot: default checkpoints, demo sound library, icons, model cards."""
