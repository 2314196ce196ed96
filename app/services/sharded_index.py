"""Moved to app.services.library.sharded; this name is kept for callers that import it from here."""

from app.services.library.sharded import (  # noqa: F401
    done_in_parts,
    embed_share,
    merge_parts,
    plan_files,
    read_plan,
    save_part,
    shard_dir,
    sharded_index_job,
    write_plan,
)
