"""What the tag writer writes where, per format: the plan (the fields a write changes), the write, the read-back.

WAV: `LIST/INFO` IKEY and ICMT and the BWF `bext` description (riff_writer.py); FLAC, Ogg Vorbis, Opus: Vorbis
comments KEYWORDS and DESCRIPTION (mutagen); MP3: ID3v2 `TXXX:KEYWORDS` and `COMM` (mutagen, the frames kept as
read: no translation to ID3v2.4, and the ID3v1 tag put back byte for byte). Keywords are added to the field's own
text, which must decode exactly (`tag_fields.strict_info_value`); a description replaces the file's own; an empty
list of values removes the field (a description cleared on request). `read_back` compares what the copy holds
with the plan exactly, however long (`read_tags` cuts every field for the search text).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Any, BinaryIO

from app.services.library import riff_writer
from app.services.library.tag_fields import BEXT_FIELD, ID3V1_BYTES, raw_fields, strict_info_value

WAV_EXT = (".wav", ".wave", ".bwf")
VORBIS_EXT = (".flac", ".ogg", ".oga", ".opus")
MP3_EXT = (".mp3",)
MP3_FIELDS = {"TXXX:KEYWORDS": "TXXX:KEYWORDS", "COMM": "COMM:"}  # plan key -> tag_fields' name of the frames

Plan = dict[str, list[str]]  # container field -> its new values ([]: the field is removed)


class TagWriteError(Exception):
    """Why one file's tags were not written (the original is untouched)."""


def keyword_set(values: Sequence[str]) -> set[str]:
    """Every keyword a field's values hold, casefolded: split at ';' and, separately, at ',' (both are in use)."""
    out: set[str] = set()
    for v in values:
        for sep in (";", ","):
            out.update(" ".join(k.split()).casefold() for k in v.split(sep))
    out.discard("")
    return out


def missing_keywords(existing: Sequence[str], keywords: Sequence[str]) -> list[str]:
    have = keyword_set(existing)
    return [k for k in dict.fromkeys(keywords) if k.strip() and k.casefold() not in have]


def _joined(existing: Sequence[str], added: Sequence[str]) -> str:
    return "; ".join([v for v in existing if v.strip()] + list(added))


def kind_of(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    for kind, exts in (("wav", WAV_EXT), ("vorbis", VORBIS_EXT), ("mp3", MP3_EXT)):
        if ext in exts:
            return kind
    raise TagWriteError(f"no tag writer for {ext or 'files without an extension'} (WAV, FLAC, Ogg and MP3 only)")


def plan_tags(path: str, keywords: Sequence[str], description: str | None = None) -> Plan:
    """The fields that writing would change (container field -> values); empty when the file holds them all.
    description: None leaves the file's own; '' removes it."""
    kind = kind_of(path)
    if kind == "wav":
        return _plan_wav(path, keywords, description)
    if kind == "vorbis":
        return _plan_vorbis(path, keywords, description)
    return _plan_mp3(path, keywords, description)


def set_fields(kind: str, plan: Plan) -> set[str]:
    """The names `tag_fields.raw_fields` gives the fields a plan sets."""
    return {MP3_FIELDS[k] for k in plan} if kind == "mp3" else set(plan)


# ----------------------------------------------------------------------------------------------------- WAV


def _plan_wav(path: str, keywords: Sequence[str], description: str | None) -> Plan:
    fields = raw_fields(path, "wav")
    plan: Plan = {}
    if any(k.strip() for k in keywords):
        old = [strict_info_value("IKEY", raw) for cid, raw in fields if cid == "IKEY"]  # duplicates merged
        added = missing_keywords(old, keywords)
        if added:
            plan["IKEY"] = [_joined(old, added)]
    if description is None:
        return plan
    comments = [raw for cid, raw in fields if cid == "ICMT"]
    bext = next((raw for cid, raw in fields if cid == BEXT_FIELD), None)
    if description == "":  # cleared: the comment goes, the bext description is blanked
        if comments:
            plan["ICMT"] = []
        if bext is not None and bext.strip(b"\x00"):
            plan[BEXT_FIELD] = [""]
        return plan
    if [c.rstrip(b"\x00") for c in comments] != [description.encode("utf-8")]:
        plan["ICMT"] = [description]
    fits = description.isascii() and len(description) <= riff_writer.BEXT_DESCRIPTION_BYTES
    if bext is not None and fits and bext != _bext_bytes(description):
        plan[BEXT_FIELD] = [description]
    return plan


def _bext_bytes(description: str) -> bytes:
    return description.encode("ascii").ljust(riff_writer.BEXT_DESCRIPTION_BYTES, b"\x00")


def _write_wav(src: str, out: BinaryIO, plan: Plan) -> None:
    values = {cid.encode(): (plan[cid][0] if plan[cid] else None) for cid in ("IKEY", "ICMT") if cid in plan}
    bext = plan.get(BEXT_FIELD, [None])[0]
    riff_writer.write_riff_copy(src, out, values, bext)


def _wav_expected(plan: Plan) -> dict[str, list[bytes]]:
    out = {cid: [v.encode("utf-8") + b"\x00" for v in plan[cid]] for cid in ("IKEY", "ICMT") if cid in plan}
    if BEXT_FIELD in plan:
        out[BEXT_FIELD] = [_bext_bytes(plan[BEXT_FIELD][0])]
    return out


# -------------------------------------------------------------------------------------------------- Vorbis


def _plan_vorbis(path: str, keywords: Sequence[str], description: str | None) -> Plan:
    import mutagen

    f = mutagen.File(path)
    if f is None or type(f).__name__ not in ("FLAC", "OggVorbis", "OggOpus"):
        raise TagWriteError(f"not a FLAC, Ogg Vorbis or Ogg Opus file ({type(f).__name__ if f else 'unknown'})")
    tags = f.tags if f.tags is not None else {}
    old = [str(v) for v in tags.get("KEYWORDS", [])]
    plan: Plan = {}
    added = missing_keywords(old, keywords)
    if added:
        plan["KEYWORDS"] = old + added
    said = [str(v) for v in tags.get("DESCRIPTION", [])]
    if description == "" and said:
        plan["DESCRIPTION"] = []
    elif description and said != [description]:
        plan["DESCRIPTION"] = [description]
    return plan


def _write_vorbis(path: str, plan: Plan) -> None:
    import mutagen

    f = mutagen.File(path)
    if f.tags is None:
        f.add_tags()
    for key, values in plan.items():
        if values:
            f.tags[key] = values
        elif key in f.tags:
            del f.tags[key]
    f.save()


# ----------------------------------------------------------------------------------------------------- MP3


def _id3(path: str) -> Any:  # noqa: ANN401 - mutagen's ID3
    """The file's ID3v2 tag as written (translate=False: mutagen's default converts ID3v2.3 frames to v2.4 and
    merges or drops some, TYER/TDAT/TSIZ, '(12)Other' genres), or an empty one."""
    from mutagen.id3 import ID3, ID3NoHeaderError

    try:
        return ID3(path, translate=False)
    except ID3NoHeaderError:
        return ID3()


def _id3_values(tags: Any, key: str) -> list[list[str]]:  # noqa: ANN401 - mutagen's ID3
    """The text of each TXXX:KEYWORDS frame (any case) or each COMM frame without a description."""
    if key == "TXXX:KEYWORDS":
        return [[str(t) for t in fr.text] for fr in tags.getall("TXXX") if fr.desc.lower() == "keywords"]
    return [[str(t) for t in fr.text] for fr in tags.getall("COMM") if fr.desc == ""]


def _plan_mp3(path: str, keywords: Sequence[str], description: str | None) -> Plan:
    tags = _id3(path)
    old = [t for values in _id3_values(tags, "TXXX:KEYWORDS") for t in values]
    plan: Plan = {}
    added = missing_keywords(old, keywords)
    if added:
        plan["TXXX:KEYWORDS"] = [_joined(old, added)]
    said = _id3_values(tags, "COMM")
    if description == "" and said:
        plan["COMM"] = []
    elif description and said != [[description]]:
        plan["COMM"] = [description]
    return plan


def _write_mp3(original: str, path: str, plan: Plan) -> None:
    from mutagen.id3 import COMM, TXXX

    tags = _id3(path)
    version = 3 if tags.version[:2] == (2, 3) else 4  # keep an ID3v2.3 tag v2.3 (older players read only that)
    if "TXXX:KEYWORDS" in plan:
        for key in [k for k, fr in tags.items() if fr.FrameID == "TXXX" and fr.desc.lower() == "keywords"]:
            del tags[key]
        tags.add(TXXX(encoding=3, desc="KEYWORDS", text=plan["TXXX:KEYWORDS"]))
    if "COMM" in plan:
        for key in [k for k, fr in tags.items() if fr.FrameID == "COMM" and fr.desc == ""]:
            del tags[key]
        if plan["COMM"]:
            tags.add(COMM(encoding=3, lang="eng", desc="", text=plan["COMM"]))
    tags.save(path, v2_version=version)  # v1=1: an ID3v1 tag is rewritten from the frames...
    _put_back_id3v1(original, path)  # ... so the original's goes back


def _put_back_id3v1(original: str, path: str) -> None:
    with open(original, "rb") as src:
        src.seek(max(0, os.fstat(src.fileno()).st_size - ID3V1_BYTES))
        v1 = src.read(ID3V1_BYTES)
    if not v1.startswith(b"TAG") or len(v1) != ID3V1_BYTES:
        return
    with open(path, "r+b") as dst:
        dst.seek(max(0, os.fstat(dst.fileno()).st_size - ID3V1_BYTES))
        if dst.read(3) == b"TAG":
            dst.seek(-3, os.SEEK_CUR)
            dst.write(v1)


# ------------------------------------------------------------------------------------------ write, read back


def write_copy(kind: str, original: str, tmp_fd: int, tmp: str, plan: Plan) -> None:
    """Write the original with the plan's fields into the copy `tmp` (open as `tmp_fd`, closed here), every
    other byte kept."""
    with os.fdopen(tmp_fd, "wb") as out:
        if kind == "wav":
            _write_wav(original, out, plan)
            return
        with open(original, "rb") as src:
            shutil.copyfileobj(src, out, riff_writer.COPY_BLOCK)
    if kind == "vorbis":  # mutagen rewrites the closed copy in place
        _write_vorbis(tmp, plan)
    else:
        _write_mp3(original, tmp, plan)


def read_back(kind: str, path: str, plan: Plan) -> list[str]:
    """The plan's fields whose values in the file at `path` are not exactly the plan's."""
    if kind == "mp3":
        tags = _id3(path)
        return [k for k, v in plan.items() if _id3_values(tags, k) != ([v] if v else [])]
    fields = raw_fields(path, kind)
    expected = _wav_expected(plan) if kind == "wav" else {k: [v.encode("utf-8") for v in vs] for k, vs in
                                                          plan.items()}
    return [k for k, want in expected.items() if [raw for name, raw in fields if name == k] != want]
