"""What this machine offers Earshot: compute devices, audio devices, models. Cheap to call again."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field

from app.services.devices import DeviceStatus, device_status
from app.services.jobs import Job
from app.services.registry import ModelEntry, ModelRegistry, RegistryProblem


@dataclass
class Environment:
    devices: list[str]
    device: str  # what "auto" or the preference resolves to
    device_error: str = ""
    torch_version: str = ""
    audio_input: bool = False
    audio_output: bool = False
    audio_message: str = ""
    audio: DeviceStatus = field(default_factory=lambda: DeviceStatus(False, False, "not checked yet"))
    models: list[ModelEntry] = field(default_factory=list)
    model_problems: list[RegistryProblem] = field(default_factory=list)
    python: str = platform.python_version()


def default_threads() -> int:
    """Every core on a machine of one or two (leaving one of two idle halved indexing and searching, while the
    interface and the audio callback need little), else all but one for the interface and audio."""
    n = os.cpu_count() or 2
    return n if n <= 2 else n - 1


def apply_threads(threads: int) -> None:
    """Cap torch's and FAISS's CPU threads (model work must not starve the GUI or the audio callback)."""
    import faiss
    import torch

    threads = max(1, int(threads))
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)


def probe_environment(
    registry: ModelRegistry, device_preference: str = "auto", threads: int | None = None
) -> Job[Environment]:
    """Import the heavy libraries and look around; a job so the GUI can run it off its thread."""
    yield {"message": "loading PyTorch"}
    import torch

    if threads is not None:
        apply_threads(threads)

    from core.device import available_devices, resolve_device

    devices = available_devices()
    device_error = ""
    try:
        device = str(resolve_device(device_preference))
    except ValueError as e:
        device, device_error = devices[0], str(e)
    yield {"message": "looking for audio devices"}
    audio = device_status()
    yield {"message": "listing models"}
    models = registry.scan()
    return Environment(
        devices=devices,
        device=device,
        device_error=device_error,
        torch_version=torch.__version__,
        audio_input=audio.input_ok,
        audio_output=audio.output_ok,
        audio_message=audio.message,
        audio=audio,
        models=models,
        model_problems=list(registry.problems),
    )


def audio_status_job() -> Job[DeviceStatus]:
    """Ask PortAudio to list the audio devices again (a device or the sound server came or went): a job, as
    re-listing may take a moment."""
    yield {"message": "looking for audio devices"}
    return device_status(rescan=True)
