"""`earshot info`: compute devices, audio devices and models found on this machine."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from app import __version__


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sub.add_parser("info", help="compute devices, audio devices and models found on this machine")
    p.add_argument("--device", default="auto", help="device preference to resolve (auto, cpu, cuda, mps)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from app.services.environment import probe_environment
    from app.services.jobs import drain
    from app.services.registry import ModelRegistry, user_models_dir

    env = drain(probe_environment(ModelRegistry(), args.device))
    info: dict[str, Any] = {
        "earshot": __version__,
        "python": env.python,
        "torch": env.torch_version,
        "devices": env.devices,
        "device": env.device,
        "device_error": env.device_error,
        "audio_input": env.audio_input,
        "audio_output": env.audio_output,
        "audio": env.audio_message,
        "models": [e.name for e in env.models],
        "model_problems": [{"path": str(p.path), "message": p.message} for p in env.model_problems],
        "user_models_dir": str(user_models_dir()),
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            if key != "model_problems" and (value or key != "device_error"):  # no error: no empty line
                print(f"{key:>16}: {', '.join(value) if isinstance(value, list) else value}")
        for p in env.model_problems:
            print(f"problem: {p.path}: {p.message}", file=sys.stderr)
    return 0
