"""Compute-device selection: cpu, cuda or mps, and the precision that goes with it."""

from __future__ import annotations

import os

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def available_devices() -> list[str]:
    """The devices this machine can run on, best first."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    found.append("cpu")
    return found


def resolve_device(preference: str = "auto") -> torch.device:
    """Turn a user preference into a device; a device that is not present is refused by name."""
    preference = (preference or "auto").lower()
    if preference not in DEVICE_CHOICES and not preference.startswith("cuda:"):
        raise ValueError(f"unknown device {preference!r}; choose one of {', '.join(DEVICE_CHOICES)}")
    available = available_devices()
    if preference == "auto":
        return torch.device(available[0])
    if preference.split(":")[0] not in available:
        raise ValueError(f"device {preference!r} is not available here (available: {', '.join(available)})")
    return torch.device(preference)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """Mixed precision on CUDA (bf16 where supported, else fp16); full precision elsewhere."""
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def limit_threads(leave_free: int = 1) -> int:
    """Cap torch's intra-op threads so training leaves a core for the GUI and audio."""
    n = max(1, (os.cpu_count() or 1) - leave_free)
    torch.set_num_threads(n)
    return n
