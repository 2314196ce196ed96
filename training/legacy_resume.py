"""The resume formats of Earshot before the one training loop (training/trainer.py, 2026-11-23), recognised only
to refuse them by name: none can be continued. Read by `training.resume_format.read_resume` (so a file in an old
format gets a message naming it, not "not an Earshot resume state") and `training.retrieval_train.train` (the old
retrieval loop kept its state in the feature cache folder). Nothing else needs them; delete this module when no
resume states from before then are around."""

from __future__ import annotations

from pathlib import Path


def legacy_format(meta: dict[str, str]) -> str | None:
    """The old format a resume file's safetensors metadata is in, in words, or None."""
    if "earshot_resume" in meta:
        return "the units trainer's resume format 1 (no RNG state)"
    if "scalars" in meta and "param_groups" in meta:
        return "the words trainer's resume format 1 (optimizer step counts not saved)"
    if "state" in meta and "python_rng" in meta.get("state", ""):
        return "the retrieval trainer's resume format 1"
    return None


def old_retrieval_resume(cache_dir: Path) -> Path:
    """Where the retrieval loop before training.trainer kept its resume state."""
    return cache_dir / "resume.safetensors"
