"""Index a very large library with many processes: `torchrun --nproc_per_node N -m app.cli index DIR`.

Three phases, each resumable:
1. plan (rank 0): scan the folder and list the files whose catalog row is missing or out of date; the plan
   is written to `<catalog>/shards/<model>/plan.json` (a re-run with the same files keeps the same plan and
   the parts already written);
2. embed (every rank): hash, decode and embed the plan's files `rank::N` (the DistributedSampler split),
   writing a part file every `part_files` files: safetensors with each file's mean and window vectors, and
   its size, mtime, hash and audio facts (or its error) as JSON metadata;
3. merge (rank 0): commit every part entry whose file is unchanged on disk into the SQLite catalog and the
   FAISS index through the library's public API (`library.files.record`), then run the ordinary incremental
   index job, which finds those files up to date and takes care of deletions, moves and anything a part
   missed; finally the shard folder is removed.
Ranks other than 0 never open the catalog: they read the plan and write their own part files only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from app.services.library.embedding import embed_file_with_categories
from app.services.library.indexer import index_library
from app.services.library.library import Library
from app.services.library.records import BrokenModelError, Embedder, IndexReport, TextEncoder
from app.services.library.scan import ScannedFile, scan_folder
from core import distributed as ddp
from core.audio import AudioError, audio_info
from core.checkpoints import CheckpointError, safetensors_metadata
from core.files import hash_file

Job = Generator[dict[str, Any], None, Any]


def shard_dir(lib: Library, model_id: str) -> Path:
    return lib.catalog_path.parent / "shards" / re.sub(r"[^A-Za-z0-9_.-]+", "_", model_id)


def plan_files(lib: Library, model_id: str, categorised: bool = False) -> list[ScannedFile]:
    """Files on disk whose catalog row for `model_id` is missing, changed, or has no vector yet (or, when the
    model has category heads, `categorised`, no categories yet)."""
    rows = lib.files.rows(model_id, categorised=categorised)
    todo = []
    for f in scan_folder(lib.root).files:
        row = rows.get(f.key)
        if row is None or (row.size, row.mtime_ns) != (f.size, f.mtime_ns) or (row.status == "ok"
                                                                               and not row.has_vector):
            todo.append(f)
    return todo


def write_plan(folder: Path, model_id: str, files: list[ScannedFile], world_size: int) -> str:
    """Write plan.json (kept, with its parts, when it is the same plan as last time); returns its id."""
    listing = [[f.rel, f.path, f.size, f.mtime_ns] for f in files]
    plan_id = hashlib.sha256(json.dumps([model_id, world_size, listing]).encode()).hexdigest()[:16]
    path = folder / "plan.json"
    if path.is_file():
        try:
            if json.loads(path.read_text())["id"] == plan_id:
                return plan_id
        except (OSError, ValueError, KeyError):
            pass
        shutil.rmtree(folder)  # another plan: its parts no longer apply
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"id": plan_id, "model_id": model_id, "world_size": world_size, "files": listing}))
    os.replace(tmp, path)
    return plan_id


def read_plan(folder: Path) -> tuple[str, list[ScannedFile]]:
    plan = json.loads((folder / "plan.json").read_text())
    return plan["id"], [ScannedFile(*row) for row in plan["files"]]


def _entries(path: Path) -> list[dict[str, Any]]:
    """The file records of a part (its metadata); the vectors are not read."""
    return json.loads(safetensors_metadata(path)["entries"])


def done_in_parts(folder: Path, rank: int) -> set[str]:
    """Relative paths this rank already wrote to its part files (a resumed run skips them)."""
    done: set[str] = set()
    for part in sorted(folder.glob(f"part-{rank:04d}-*.safetensors")):
        try:
            done |= {e["rel"] for e in _entries(part)}
        except (OSError, ValueError, KeyError, CheckpointError):
            part.unlink(missing_ok=True)  # a torn part: its files are embedded again
    return done


def save_part(folder: Path, rank: int, entries: list[dict[str, Any]], arrays: dict[str, np.ndarray]) -> None:
    n = len(list(folder.glob(f"part-{rank:04d}-*.safetensors")))
    path = folder / f"part-{rank:04d}-{n:05d}.safetensors"
    tmp = path.with_name(path.name + ".tmp")
    save_file(arrays or {"empty": np.zeros(0, np.float32)}, str(tmp), metadata={"entries": json.dumps(entries)})
    os.replace(tmp, path)


def embed_share(folder: Path, files: list[ScannedFile], embedder: Embedder, ctx: ddp.DistContext,
                part_files: int = 64) -> Job:
    """Phase 2 on one rank: embed files[rank::N] into part files; returns (files embedded, failed)."""
    mine = files[ctx.rank :: ctx.world_size]
    done = done_in_parts(folder, ctx.rank)
    todo = [f for f in mine if f.rel not in done]
    entries: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    failed = 0
    for i, f in enumerate(todo):
        entry: dict[str, Any] = {"rel": f.rel, "path": f.path}
        try:
            st = os.stat(f.path)
            entry |= {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "hash": hash_file(f.path)}
            info = audio_info(f.path)
            mean, windows, categories = embed_file_with_categories(f.path, embedder)
            if not np.isfinite(windows).all():
                raise BrokenModelError(f"model {embedder.model_id!r} is broken: it produced NaN/inf values "
                                       f"(for {f.rel})")
            entry |= {"duration": info.duration, "sample_rate": info.sample_rate, "channels": info.channels,
                      "categories": categories}
            arrays[f"mean.{len(entries)}"] = mean.astype(np.float32)
            arrays[f"windows.{len(entries)}"] = windows.astype(np.float32)
        except FileNotFoundError:
            continue  # gone: the merge's ordinary pass removes it
        except (AudioError, OSError) as e:
            entry["error"] = str(e).replace(f.path, f.rel)
            failed += 1
        entries.append(entry)
        if len(entries) >= part_files:
            save_part(folder, ctx.rank, entries, arrays)
            entries, arrays = [], {}
        yield {"step": len(done) + i + 1, "total": len(mine), "message": f"rank {ctx.rank}: {f.rel}"}
    if entries:
        save_part(folder, ctx.rank, entries, arrays)
    return len(todo), failed


def merge_parts(lib: Library, folder: Path, model_id: str) -> Job:
    """Phase 3 on rank 0: commit the parts' files that are unchanged on disk; returns how many were merged."""
    seen = {f.key for f in scan_folder(lib.root).files}
    parts = sorted(folder.glob("part-*.safetensors"))
    merged = 0
    for k, part in enumerate(parts):
        entries, arrays = _entries(part), load_file(str(part))
        for j, e in enumerate(entries):
            try:
                st = os.stat(e["path"])
            except OSError:
                continue
            if "size" not in e or (st.st_size, st.st_mtime_ns) != (e["size"], e["mtime_ns"]):
                continue  # changed since it was read: the ordinary pass reads it again
            f = ScannedFile(e["rel"], e["path"], e["size"], e["mtime_ns"])
            if "error" in e:
                meta = {"duration": None, "sample_rate": None, "channels": None, "status": "error",
                        "error": e["error"]}
                lib.files.record(model_id, f, f.size, f.mtime_ns, e["hash"], seen, meta=meta)
            else:
                meta = {"duration": e["duration"], "sample_rate": e["sample_rate"], "channels": e["channels"],
                        "status": "ok", "error": None}
                lib.files.record(model_id, f, f.size, f.mtime_ns, e["hash"], seen, meta=meta,
                           vectors=(arrays[f"mean.{j}"], arrays[f"windows.{j}"]), categories=e.get("categories"))
            merged += 1
        yield {"step": k + 1, "total": len(parts), "message": f"merging {part.name}"}
    lib.vectors.save(model_id)
    return merged


def sharded_index_job(root: str | os.PathLike[str], embedder: Embedder, ctx: ddp.DistContext,
                      part_files: int = 64, text_encoder: TextEncoder | None = None) -> Job:
    """The whole sharded run on one rank. Rank 0 returns (the final IndexReport, a dict of shard counts);
    the other ranks return None. Rank 0's final pass also brings the text channel up to date (`text_encoder`:
    the sentence encoder; None = keywords only)."""
    root = Path(root)
    model_id = embedder.model_id
    lib = Library.open(root) if ctx.is_main else None
    try:
        if lib is not None:
            yield {"step": 0, "total": 0, "message": "planning"}
            lib.vectors.register_model(embedder)
            folder = shard_dir(lib, model_id)
            write_plan(folder, model_id, plan_files(lib, model_id, bool(getattr(embedder, "category_names", ()))),
                       ctx.world_size)
            _broadcast_path(folder, ctx)
        else:
            folder = _broadcast_path(None, ctx)
        ddp.barrier(ctx)
        _, files = read_plan(folder)
        embedded, failed = yield from embed_share(folder, files, embedder, ctx, part_files)
        ddp.barrier(ctx)
        if lib is None:
            return None
        merged = yield from merge_parts(lib, folder, model_id)
        # deletions, moves, leftovers, and the names and tags of every file
        report: IndexReport = yield from index_library(lib, embedder, text_encoder=text_encoder)
        shutil.rmtree(folder, ignore_errors=True)
        failures = [{"path": f.path, "error": f.error} for f in lib.files.failed()]
        return report, {"processes": ctx.world_size, "planned": len(files), "merged": merged,
                        "embedded_by_rank0": embedded, "failed_by_rank0": failed, "failures": failures}
    finally:
        if lib is not None:
            lib.close()


def _broadcast_path(path: Path | None, ctx: ddp.DistContext) -> Path:
    """Rank 0's shard folder to every rank (the catalog may live in the user data directory)."""
    box = [str(path) if path is not None else None]
    if ctx.enabled:
        torch.distributed.broadcast_object_list(box, src=0)
    return Path(box[0])
