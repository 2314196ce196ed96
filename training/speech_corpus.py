"""Training speech that sounds like people: real recordings from Debian packages, TTS voices built from human
recordings, and espeak-ng, every utterance labelled (real or synthetic, speaker, language, source, license).

    python -m training.speech_corpus OUT_DIR [--words N] [--sentences N] [--heldout-package PKG] ...

OUT_DIR gets 16-kHz mono wavs, `utterances.csv` (everything, for the units model), `words.csv` (isolated
English words, the format training/words_train.py reads) and `summary.json`. Sources are `REAL_SOURCES` and
`TTS_VOICES`; held-out packages and speakers (`heldout` and the `heldout-NAME` sets of `HELDOUT_SETS`) are never
trained on, and reserved packages (training/reserved.py) are refused. Deterministic
given the seed and resumable. The sources, columns, splits and the packages to install: docs/corpora.md.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core import audio as audio_path
from core.files import atomic_path
from models.framing import SAMPLE_RATE
from training import espeak_corpus
from training.reserved import check_not_reserved as check_package
from training.reserved import is_speech_eval

Job = Generator[dict[str, Any], None, Any]

# reserved for evaluation by the project: never read, whatever the caller asks
AUDIO_SUFFIXES = (".wav", ".gsm", ".flac", ".ogg", ".au")
# prompt-set files that are not speech, by path (Asterisk ships silence/1.wav .. silence/10.wav)
NON_SPEECH = re.compile(r"(beep|tone|silence|monkeys|glorious|music|dtmf)", re.IGNORECASE)
MIN_SECONDS, MAX_SECONDS = 0.3, 30.0
MIN_RMS_DB = -50.0  # quieter files are silence or a failed synthesis, not speech
UTTERANCE_COLUMNS = ("path", "speaker", "real", "language", "source", "license", "text", "split")
WORD_COLUMNS = ("path", "word", "speaker", "split", "synthetic", "phonemes")


@dataclass(frozen=True)
class RealSource:
    """Speech files of one package. `speaker` and `language` may name groups of `pattern` (`{voice}`)."""

    package: str
    speaker: str
    language: str
    under: str = "/usr/share/asterisk/sounds/"  # only the package's files below this folder
    pattern: str = ""  # regex on the path below `under`; files that do not match are left out
    skip: str = ""  # regex on the file stem: non-speech files of this source (grunts, coughs)
    words: bool = False  # isolated English words: a stem that is a CMUdict word goes to words.csv
    license: str = ""  # when the package's `Files: *` license is not the one of these files
    # what each file says, by stem: those files go to words.csv with their ARPAbet (before `words` is tried)
    texts: tuple[tuple[str, str], ...] = ()
    split: str = ""  # an evaluation-only source: every file gets this split, whatever the held-out settings
    min_rms_db: float = MIN_RMS_DB  # quieter files are left out (a source recorded very low sets its own)
    min_seconds: float = MIN_SECONDS  # shorter files are left out (a source of clipped single letters sets its own)
    word_group: str = ""  # a group of `pattern` that is each file's word (a set that is not English: no ARPAbet)
    raw: tuple[str, int] = ("", 0)  # headerless files: (libsndfile subtype, rate), e.g. ("ULAW", 8000)

    def __post_init__(self) -> None:
        if self.word_group and (self.texts or self.words):
            raise ValueError(f"{self.package}: a source's words come from word_group or from texts/words, not both")
        if self.word_group and self.word_group not in re.compile(self.pattern).groupindex:
            raise ValueError(f"{self.package}: word_group {self.word_group!r} is not a group of its pattern")


_NUMBERS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# kajongg's voice files by stem: tiles are suit then number ("b3": "bamboo three"). The game ships no
# transcripts; the suits' words and their order were checked with a grammar-constrained recogniser
# (pocketsphinx's en-us model choosing between "bamboo three" / "three bamboo" / "three bamboos" ...).
KAJONGG_TEXTS = (
    *((f"{s}{i + 1}", f"{suit} {n}") for s, suit in (("b", "bamboo"), ("c", "character"), ("s", "circle"))
      for i, n in enumerate(_NUMBERS)),
    ("we", "east"), ("wn", "north"), ("ws", "south"), ("ww", "west"),
    ("db", "blue dragon"), ("dg", "green dragon"), ("dr", "red dragon"),
    ("chow", "chow"), ("pung", "pung"), ("kong", "kong"), ("mahjongg", "mah jong"), ("nochoice", "no choice"),
    ("originalcall", "original call"), ("violatesoriginalcall", "violates original call"),
    ("dangerousgame", "dangerous game"),
)

# Spoken letters (split "heldout-letters"): a file named after a letter says that letter's name; its word is
# CMUdict's entry for the letter ("a." = EY, "w." = D AH B AH L Y UW), not the word "a" (AH).
LETTER_TEXTS = tuple((c, f"{c}.") for c in "abcdefghijklmnopqrstuvwxyz")
# Spoken numbers (split "heldout-numbers"): a file named after a number says it ("7" or "seven" -> "seven")
_NUMBER_WORDS = ("zero", *_NUMBERS, "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                 "seventeen", "eighteen", "nineteen", "twenty", "thirty")
NUMBER_TEXTS = (*((w, w) for w in _NUMBER_WORDS), *((str(i), w) for i, w in enumerate(_NUMBER_WORDS) if i <= 9))
# saytime's clock (split "heldout-saytime"): a file named by a number says it; "0" (what the clock says with it is
# not known here; times such as 10:05 take its "oh" file), "oh" and the clock's other words are left out
SAYTIME_TEXTS = (*((str(i), w) for i, w in enumerate(_NUMBER_WORDS[:21]) if i), ("30", "thirty"), ("40", "forty"),
                 ("50", "fifty"))
# gcin's syllables (split "heldout-mandarin"): a folder names a syllable in bopomofo and its tone (no digit: the
# first tone). Kept: the first-tone syllables, so words differ in their segments and not in pitch, less the lone
# initials U+3105-U+3112 (ㄅ..ㄒ), whose letter names sound as other folders' syllables do (ㄅ "bo" = ㄅㄛ)
MANDARIN_PATTERN = r"(?P<syllable>(?![\u3105-\u3112]/)[\u3105-\u3129]+)/(?P<voice>3|5)\.ogg$"

REAL_SOURCES = (
    RealSource("asterisk-core-sounds-es-wav", "es_MX_f_Allison", "es-MX"),
    RealSource("asterisk-core-sounds-fr-wav", "fr_CA_f_June", "fr-CA"),
    RealSource("asterisk-core-sounds-it-wav", "it_IT_m_Carlo", "it-IT"),
    RealSource("asterisk-core-sounds-ru-wav", "ru_RU_f_IvrvoiceRU", "ru-RU"),
    RealSource("asterisk-prompt-it-menardi-wav", "it_IT_f_Menardi", "it-IT"),
    RealSource("asterisk-prompt-es-co", "es_CO_prompts", "es-CO"),
    RealSource("asterisk-prompt-fr-armelle", "fr_FR_f_Armelle", "fr-FR"),
    # game voice packs recorded by actors: short English lines (many one word), one voice per folder
    RealSource("hedgewars-data", "hedgewars-{voice}", "en", "/usr/share/games/hedgewars/Data/Sounds/voices/",
               pattern=r"(?P<voice>British|Classic|Default|HillBilly|Mobster|Pirate|Russian|Singer|Surfer)/[^/]+$",
               skip=r"^(ooff|ow|jump|firepunch|laugh|poison|hmm|nooo|uh-oh)", words=True,
               license="GFDL-1.3 (Files: share/hedgewars/Data/Sounds/*)"),
    RealSource("hedgewars-data", "hedgewars-Default_{lang}", "{lang}",
               "/usr/share/games/hedgewars/Data/Sounds/voices/", pattern=r"Default_(?P<lang>es|pl|ru|uk)/[^/]+$",
               skip=r"^(ooff|ow|jump|firepunch|laugh|poison|hmm|nooo|uh-oh)",
               license="GFDL-1.3 (Files: share/hedgewars/Data/Sounds/*)"),
    # evaluation only (split "heldout-kajongg", never trained on): four English voices of the mahjongg game
    # reading tile names and calls, the same 42 items each (German voices, possibly the same people, left out)
    RealSource("kajongg", "kajongg-{voice}", "en", "/usr/share/kajongg/voices/",
               pattern=r"(?P<voice>male1|male2|female1|female2)/[^/]+$", texts=KAJONGG_TEXTS,
               split="heldout-kajongg", license="GPL-2+ (voices/*/COPYRIGHT: Wolfgang Rohdewald)",
               min_rms_db=-70.0),  # two voices are recorded ~20 dB low (peaks near -38 dBFS): kept as they are
    # evaluation only (split "heldout-letters"): the 26 letter names read by two voices, a-h by a third. GENtle
    # reads DNA aloud with Voxeo's telephone prompts (8 kHz mu-law); qABCs' US English alphabet (its other
    # English set, en_gb, is left out: 24 kHz like the package's other languages, likely synthetic); Scid's
    # board files (a-h; its 1-8 are in the numbers set, its piece names are not used)
    RealSource("gentle", "gentle-voxeo", "en", "/usr/share/gentle/wav/", pattern=r"[A-Z]\.wav$",
               texts=tuple((c.upper(), t) for c, t in LETTER_TEXTS), split="heldout-letters",
               license="LGPL-3 (wav/*: 2005 Voxeo Corporation)"),
    RealSource("qabcs-data", "qabcs-en", "en", "/usr/share/qabcs/abcs/en/sounds/alpha/", pattern=r"[a-z]\.ogg$",
               texts=LETTER_TEXTS, split="heldout-letters",
               license="GPL-3+ (Files: *; en/abc1.properties credits Jordan Irwin)"),
    RealSource("scid-data", "scid", "en", "/usr/share/scid/sounds/", pattern=r"[a-h]\.wav$", texts=LETTER_TEXTS,
               split="heldout-letters", license="GPL-2.0 (Files: *: Shane Hudson)", min_seconds=0.2),
    # evaluation only (split "heldout-numbers"): cannonsmash's umpire calls zero-twenty and thirty (one voice; its
    # "all", "love all" and game sounds are left out), and Scid's 1-8 (a second voice, the one of its letters)
    RealSource("csmash-data", "csmash", "en", "/usr/share/games/csmash/wav/",
               pattern=r"(" + "|".join(stem for stem, _ in NUMBER_TEXTS if not stem.isdigit()) + r")\.wav$",
               texts=NUMBER_TEXTS, split="heldout-numbers", license="GPL-2+ (Kanna Yoshihiro)"),
    RealSource("scid-data", "scid", "en", "/usr/share/scid/sounds/", pattern=r"[1-8]\.wav$", texts=NUMBER_TEXTS,
               split="heldout-numbers", license="GPL-2.0 (Files: *: Shane Hudson)", min_seconds=0.2),
    # evaluation only (split "heldout-saytime"): a third voice for the numbers set's words, telephone-band (the
    # talking clock's headerless 8-kHz mu-law); evaluated with them: `--split heldout-numbers,heldout-saytime`
    RealSource("saytime", "saytime", "en", "/usr/share/saytime/", pattern=r"([1-9]|1[0-9]|[2-5]0)\.au$",
               texts=SAYTIME_TEXTS, split="heldout-saytime", raw=("ULAW", 8000), min_seconds=0.2,
               license="GPL (sound files: 2004 David C Dawson)"),
    # evaluation only (split "heldout-mandarin"): Mandarin syllables by two voices, `3.ogg` (gcin-3: Edward
    # Der-Hua Liu) and `5.ogg` (gcin-5: Chu Lo, recorded for ChionMeilin)
    RealSource("gcin-voice", "gcin-{voice}", "zh", "/usr/share/gcin-voice/ogg/", pattern=MANDARIN_PATTERN,
               word_group="syllable", split="heldout-mandarin", min_seconds=0.2,
               license="3.ogg: GPL-3 or LGPL-3 (2014 Edward Der-Hua Liu); 5.ogg: CC-BY-3 (Chu Lo, ChionMeilin)"),
)
# the evaluation-only sets: `python -m training.speech_corpus OUT --only-split heldout-letters` builds one alone
HELDOUT_SETS = tuple(sorted({s.split for s in REAL_SOURCES if s.split}))
# evaluation only: a real French prompt voice (units) and three real English game voices (units and words)
DEFAULT_HELDOUT_PACKAGES = ("asterisk-prompt-fr-armelle",)
DEFAULT_HELDOUT_SPEAKERS = ("hedgewars-British", "hedgewars-Mobster", "hedgewars-Pirate")


@dataclass(frozen=True)
class TTSVoice:
    engine: str  # flite | festival | espeak
    voice: str  # the engine's voice name
    speaker: str  # the recorded person (or espeak voice)
    package: str  # for the license


TTS_VOICES = (
    TTSVoice("flite", "awb", "awb", "flite"),
    TTSVoice("flite", "rms", "rms", "flite"),
    TTSVoice("flite", "slt", "slt", "flite"),
    TTSVoice("flite", "kal16", "kal", "flite"),
    TTSVoice("festival", "kal_diphone", "kal", "festvox-kallpc16k"),
    TTSVoice("festival", "ked_diphone", "ked", "festvox-kdlpc16k"),
    TTSVoice("festival", "cmu_us_slt_arctic_hts", "slt", "festvox-us-slt-hts"),
    TTSVoice("espeak", "en-us+m3", "espeak-en-us+m3", "espeak-ng-data"),
    TTSVoice("espeak", "en-gb+f2", "espeak-en-gb+f2", "espeak-ng-data"),
)
LICENSE_TEXTS = ("GPL-3", "GPL-2", "Apache-2.0", "MPL-2.0", "MPL-1.1", "LGPL-3", "LGPL-2.1", "Artistic", "GFDL-1.3",
                 "CC0-1.0", "BSD")


@dataclass
class Item:
    """One planned utterance. `origin` is the real file to convert, or the text for a TTS voice."""

    path: str  # relative to OUT_DIR
    speaker: str
    real: int
    language: str
    source: str  # package (real) or engine:voice (package)
    license: str
    text: str
    split: str
    origin: str = ""  # real: the package file
    engine: str = ""  # TTS: flite | festival | espeak
    voice: str = ""
    word: str = ""  # isolated words only
    phonemes: str = ""  # ARPAbet of `word` when the source named the text (`RealSource.texts`)
    min_rms_db: float = MIN_RMS_DB
    min_seconds: float = MIN_SECONDS
    raw: tuple[str, int] = ("", 0)  # RealSource.raw


def dpkg_files(package: str) -> list[str]:
    """The files an installed package owns (`dpkg -L`); empty when it is not installed."""
    proc = subprocess.run(["dpkg", "-L", check_package(package)], capture_output=True, text=True, check=False)
    return proc.stdout.splitlines() if proc.returncode == 0 else []


def package_license(package: str, doc_root: str | os.PathLike[str] = "/usr/share/doc") -> str:
    """A short license name from /usr/share/doc/PKG/copyright: the DEP-5 `License:` of the `Files: *`
    paragraph (or the first one), else one recognised from the text, else a pointer to the file."""
    path = Path(doc_root) / check_package(package) / "copyright"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown (no copyright file)"
    if text.startswith("Format:"):  # machine-readable (DEP-5)
        for para in re.split(r"\n\s*\n", text):
            if re.search(r"^Files:\s*\*\s*$", para, re.MULTILINE):
                m = re.search(r"^License:[ \t]*(\S.*)$", para, re.MULTILINE)
                if m:
                    return m.group(1).strip()
        m = re.search(r"^License:[ \t]*(\S.*)$", text, re.MULTILINE)
        if m:
            return m.group(1).strip()
    # free text: the voice/engine licence (CMU/CSTR "free of charge") outranks GPL'd build scripts
    if "Permission is hereby granted, free of charge" in text:
        return "CMU/CSTR permissive (free of charge; see copyright)"
    if "General Public License" in text:
        version = re.search(r"version (\d)", text)
        later = "+" if "any later version" in text else ""
        return f"GPL-{version.group(1)}{later}" if version else "GPL"
    return f"see {path}"


def real_items(
    sources: Sequence[RealSource],
    heldout_packages: Sequence[str],
    dev_fraction: float,
    seed: int,
    list_files: Callable[[str], list[str]] = dpkg_files,
    doc_root: str | os.PathLike[str] = "/usr/share/doc",
    heldout_speakers: Sequence[str] = (),
    vocabulary: Callable[[str], bool] | None = None,
) -> list[Item]:
    """One item per speech file the real packages own (sorted, deterministic splits). A source with
    `words=True` labels the files whose stem passes `vocabulary` (default: a CMUdict word) as that word; a
    source with `texts` labels the files it names with their text and its ARPAbet (CMUdict, word by word)."""
    from models.phonemes import text_to_phonemes

    items = []
    for src in sources:
        check_package(src.package)
        # the speech models' evaluation packages are never a training split, whatever a source says
        if is_speech_eval(src.package) and not src.split.startswith("heldout-"):
            raise ValueError(f"package {src.package!r} is held out to evaluate the speech models: its source needs "
                             f"an evaluation split ('heldout-...'), not {src.split or 'train/dev'!r}")
        license_ = src.license or package_license(src.package, doc_root)
        texts = dict(src.texts)
        for f in sorted(list_files(src.package)):
            stem, rel = Path(f).stem, f[len(src.under):]
            if not f.startswith(src.under) or not f.lower().endswith(AUDIO_SUFFIXES) or NON_SPEECH.search(rel):
                continue
            m = re.fullmatch(src.pattern, rel) if src.pattern else None
            if (src.pattern and m is None) or (src.skip and re.search(src.skip, stem, re.IGNORECASE)):
                continue
            groups = m.groupdict() if m else {}
            speaker, language = src.speaker.format(**groups), src.language.format(**groups)
            held = src.package in heldout_packages or speaker in heldout_speakers
            # split by the path inside the package, so it does not depend on where the package is installed
            split = src.split or ("heldout" if held else _split(f"{src.package}/{rel}", dev_fraction, seed))
            said = texts.get(stem, "")  # what the file says, when the source names it
            word, phonemes = said, " ".join(text_to_phonemes(said)) if said else ""
            if src.word_group:
                said = word = groups[src.word_group]
            if not said and src.words:
                vocabulary = vocabulary or _cmudict_word
                word = stem.lower() if vocabulary(stem.lower()) else ""
            out = f"real/{src.package}/{Path(rel).with_suffix('.wav')}"
            items.append(Item(out, speaker, 1, language, src.package, license_,
                              said or Path(rel).with_suffix("").as_posix(), split, origin=f, word=word,
                              phonemes=phonemes, min_rms_db=src.min_rms_db, min_seconds=src.min_seconds,
                              raw=src.raw))
    return items


def _cmudict_word(word: str) -> bool:
    from models.phonemes import default_lexicon

    return re.fullmatch(r"[a-z]+", word) is not None and word in default_lexicon().entries


def _split(key: str, dev_fraction: float, seed: int) -> str:
    return "dev" if random.Random(f"{seed}:{key}").random() < dev_fraction else "train"


def license_sentences(root: str | os.PathLike[str] = "/usr/share/common-licenses",
                      names: Sequence[str] = LICENSE_TEXTS, min_words: int = 5, max_words: int = 20) -> list[str]:
    """Plain-prose sentences of the license texts: 5-20 words of letters and light punctuation."""
    out: list[str] = []
    for name in names:
        path = Path(root) / name
        if not path.is_file():
            continue
        text = re.sub(r"\s+", " ", path.read_text(encoding="utf-8", errors="replace"))
        for s in re.split(r"(?<=[.!?;])\s+", text):
            s = s.strip()
            if re.fullmatch(r"[A-Za-z][A-Za-z0-9 ,'()-]*[A-Za-z0-9)][.!?;]?", s) and "--" not in s \
                    and min_words <= len(s.split()) <= max_words:
                out.append(s.rstrip(";"))
    return list(dict.fromkeys(out))


def tts_items(
    voices: Sequence[TTSVoice],
    words: Sequence[str],
    sentences: Sequence[str],
    n_dev_words: int,
    dev_fraction: float,
    seed: int,
    doc_root: str | os.PathLike[str] = "/usr/share/doc",
) -> list[Item]:
    """Every word and sentence in every voice; words split into train/dev by word, sentences by text."""
    rng = random.Random(seed)
    order = sorted(set(words))
    rng.shuffle(order)
    dev_words = set(order[:n_dev_words])
    licenses = {v.package: package_license(v.package, doc_root) for v in voices}
    items = []
    for v in voices:
        check_package(v.package)
        source, tag = f"{v.engine}:{v.voice} ({v.package})", _safe(f"{v.engine}-{v.voice}")
        for w in sorted(set(words)):
            items.append(Item(f"tts/{tag}/words/{w[:2]}/{w}.wav", v.speaker, 0, "en", source, licenses[v.package],
                              w, "dev" if w in dev_words else "train", engine=v.engine, voice=v.voice, word=w))
        for i, s in enumerate(sentences):
            items.append(Item(f"tts/{tag}/sentences/{i:05d}.wav", v.speaker, 0, "en", source, licenses[v.package],
                              s, _split(s, dev_fraction, seed), engine=v.engine, voice=v.voice))
    return items


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "_", name)


# ---------------------------------------------------------------------------------------------- audio


def read_origin(path: str, raw: tuple[str, int] = ("", 0)) -> tuple[np.ndarray, int]:
    """A package's audio file -> (float32 mono, rate); Asterisk's .gsm files are headerless 8-kHz GSM 6.10, and a
    source names the format of its other headerless files (`raw`: subtype, rate)."""
    if path.lower().endswith(".gsm"):  # no header: the one audio path cannot know its format
        raw = ("GSM610", 8000)
    if raw[0]:
        decoded = audio_path.decode_raw(path, raw[1], raw[0])
        return decoded.audio, decoded.sample_rate
    return read_mono(path)


def read_mono(path: str | Path) -> tuple[np.ndarray, int]:
    """Any audio file -> (float32 mono, its rate) through the one audio path."""
    decoded = audio_path.decode(path)
    return decoded.audio, decoded.sample_rate


def to_16k(wave: np.ndarray, sr: int) -> np.ndarray:
    return audio_path.resample(wave, sr, SAMPLE_RATE)


def write_wav(path: Path, wave: np.ndarray) -> None:
    """Atomic 16-bit write: a killed run never leaves a half-written file under the final name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    audio_path.save_wav(path, wave, SAMPLE_RATE)


def flite_say(text: str, voice: str) -> tuple[np.ndarray, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.wav"
        proc = subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(out)],
                              capture_output=True, timeout=60, check=False)
        if proc.returncode != 0 or not out.is_file():
            raise RuntimeError(f"flite {voice} failed on {text[:40]!r}: {proc.stderr.decode(errors='replace')[:200]}")
        return read_mono(out)


def festival_batch(items: Sequence[Item], voice: str, out_dir: Path) -> None:
    """One festival process per voice and batch (festival starts slowly): synthesise, then convert to 16 kHz."""
    with tempfile.TemporaryDirectory() as tmp:
        lines = [f"(voice_{voice})"]
        for i, it in enumerate(items):
            text = it.text.replace("\\", " ").replace('"', " ")
            lines.append(f'(utt.save.wave (utt.synth (Utterance Text "{text}")) "{tmp}/{i}.wav" \'riff)')
        script = Path(tmp) / "batch.scm"
        script.write_text("\n".join(lines) + "\n", encoding="utf-8")
        subprocess.run(["festival", "-b", str(script)], capture_output=True, timeout=60 + 10 * len(items),
                       check=False)
        for i, it in enumerate(items):
            raw = Path(tmp) / f"{i}.wav"
            if raw.is_file():
                write_wav(out_dir / it.path, to_16k(*read_mono(raw)))


def make_one(it: Item, out_dir: Path) -> None:
    """Write one non-festival item (festival goes in batches)."""
    if it.real:
        wave, sr = read_origin(it.origin, it.raw)
    elif it.engine == "flite":
        wave, sr = flite_say(it.text, it.voice)
    elif it.engine == "espeak":
        wave, sr = espeak_corpus.synthesise(it.text, it.voice, 175, 50), SAMPLE_RATE
    else:
        raise ValueError(f"unknown engine {it.engine!r}")
    write_wav(out_dir / it.path, to_16k(wave, sr))


# ---------------------------------------------------------------------------------------------- tables


def keep_usable(items: Iterable[Item], out_dir: Path) -> list[Item]:
    """Items whose file exists, lasts its source's `min_seconds` .. MAX_SECONDS (prompt sets hold a few long
    pauses) and is louder than its source's `min_rms_db`."""
    out = []
    for it in items:
        path = out_dir / it.path
        if path.is_file() and it.min_seconds <= audio_path.audio_info(path).duration <= MAX_SECONDS:
            wave, _ = read_mono(path)
            if 20 * np.log10(np.sqrt(np.mean(np.square(wave, dtype=np.float64))) + 1e-12) > it.min_rms_db:
                out.append(it)
    return out


def write_tables(out_dir: Path, items: Sequence[Item]) -> dict[str, Path]:
    utt, words = out_dir / "utterances.csv", out_dir / "words.csv"
    _write_csv(utt, UTTERANCE_COLUMNS, ({k: asdict(it)[k] for k in UTTERANCE_COLUMNS} for it in items))
    _write_csv(words, WORD_COLUMNS, ({"path": it.path, "word": it.word, "speaker": it.speaker, "split": it.split,
                                      "synthetic": 1 - it.real, "phonemes": it.phonemes} for it in items if it.word))
    return {"utterances": utt, "words": words}


def _write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    with atomic_path(path, fsync=False) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        w.writerows(rows)


def summarize(items: Sequence[Item], out_dir: Path) -> dict[str, Any]:
    """Counts and hours: overall, real vs synthetic, per source and per split."""
    def hours(group: Iterable[Item]) -> float:
        return round(sum(audio_path.audio_info(out_dir / it.path).duration for it in group) / 3600, 3)

    by_source: dict[str, list[Item]] = {}
    for it in items:
        by_source.setdefault(it.source, []).append(it)
    return {
        "utterances": len(items), "hours": hours(items),
        "speakers": len({it.speaker for it in items}),
        "real": {"utterances": sum(it.real for it in items), "hours": hours(i for i in items if i.real),
                 "speakers": sorted({i.speaker for i in items if i.real})},
        "synthetic": {"utterances": sum(1 - it.real for it in items),
                      "hours": hours(i for i in items if not i.real),
                      "speakers": sorted({i.speaker for i in items if not i.real})},
        "words": {"tokens": sum(bool(it.word) for it in items), "types": len({it.word for it in items if it.word})},
        "splits": {s: sum(it.split == s for it in items) for s in sorted({it.split for it in items})},
        "heldout_speakers": sorted({it.speaker for it in items if it.split.startswith("heldout")}),
        "per_source": {k: {"utterances": len(v), "hours": hours(v), "license": v[0].license}
                       for k, v in sorted(by_source.items())},
    }  # fmt: skip


# ---------------------------------------------------------------------------------------------- build


def available_voices(voices: Sequence[TTSVoice]) -> list[TTSVoice]:
    """The voices whose engine is installed (flite's voices are built in; festival's need their package)."""
    engines = {"flite": shutil.which("flite"), "festival": shutil.which("festival"),
               "espeak": shutil.which("espeak-ng")}
    out = []
    for v in voices:
        if not engines.get(v.engine):
            continue
        if v.engine == "festival" and not Path("/usr/share/doc", v.package).is_dir():
            continue
        out.append(v)
    return out


def build_corpus(
    out_dir: str | os.PathLike[str],
    n_words: int = 1000,
    n_sentences: int = 300,
    n_dev_words: int = 100,
    dev_fraction: float = 0.05,
    heldout_packages: Sequence[str] = DEFAULT_HELDOUT_PACKAGES,
    heldout_speakers: Sequence[str] = DEFAULT_HELDOUT_SPEAKERS,
    sources: Sequence[RealSource] = REAL_SOURCES,
    voices: Sequence[TTSVoice] | None = None,
    words: Sequence[str] | None = None,
    sentences: Sequence[str] | None = None,
    seed: int = 0,
    list_files: Callable[[str], list[str]] = dpkg_files,
    doc_root: str | os.PathLike[str] = "/usr/share/doc",
    festival_batch_size: int = 200,
) -> Job:
    """Job: convert the real recordings and synthesise the TTS items into `out_dir`; returns `summarize`.

    `words`/`sentences` override the CMUdict draw and the license-text sentences (tests pass tiny lists).
    """
    t0 = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for package in heldout_packages:
        check_package(package)
        if package not in {s.package for s in sources}:
            raise ValueError(f"held-out package {package} is not one of the real sources")
    voices = available_voices(TTS_VOICES) if voices is None else list(voices)
    if words is None:
        words = random.Random(seed).sample(espeak_corpus.candidate_words(), n_words) if n_words else []
    if sentences is None:
        pool = license_sentences()
        sentences = random.Random(seed).sample(pool, min(n_sentences, len(pool)))
    items = real_items(sources, heldout_packages, dev_fraction, seed, list_files, doc_root, heldout_speakers)
    # a package that is not installed gives no files: say so, or a held-out set would vanish without a word
    missing = sorted({s.package for s in sources} - {it.source for it in items})
    items += tts_items(voices, words, sentences, n_dev_words, dev_fraction, seed, doc_root)
    todo = [it for it in items if not (out / it.path).is_file()]
    failed: list[str] = []
    note = f"; no files from {', '.join(missing)} (not installed?)" if missing else ""
    yield {"step": 0, "total": len(todo), "message": f"{len(items)} utterances planned, {len(todo)} to make{note}"}
    done = 0
    batches: dict[str, list[Item]] = {}
    for it in todo:
        if it.engine == "festival":
            batches.setdefault(it.voice, []).append(it)
            continue
        try:
            make_one(it, out)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            failed.append(f"{it.path}: {e}")
        done += 1
        if done % 100 == 0:
            yield {"step": done, "total": len(todo), "message": it.path}
    for voice, group in batches.items():
        for i in range(0, len(group), festival_batch_size):
            chunk = group[i:i + festival_batch_size]
            try:
                festival_batch(chunk, voice, out)
            except (OSError, subprocess.TimeoutExpired) as e:
                failed.append(f"festival {voice}: {e}")
            done += len(chunk)
            yield {"step": done, "total": len(todo), "message": f"festival {voice}"}
    usable = keep_usable(items, out)
    write_tables(out, usable)
    summary = summarize(usable, out)
    summary.update(out_dir=str(out), planned=len(items), missing_packages=missing, made=len(todo) - len(failed),
                   failed=len(failed),
                   failed_examples=failed[:5], dropped=len(items) - len(usable),
                   wall_time_s=round(time.monotonic() - t0, 1))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def build_heldout_set(
    out_dir: str | os.PathLike[str],
    split: str,
    sources: Sequence[RealSource] = REAL_SOURCES,
    seed: int = 0,
    list_files: Callable[[str], list[str]] = dpkg_files,
    doc_root: str | os.PathLike[str] = "/usr/share/doc",
    heldout_packages: Sequence[str] = DEFAULT_HELDOUT_PACKAGES,
    heldout_speakers: Sequence[str] = DEFAULT_HELDOUT_SPEAKERS,
) -> Job:
    """Job: one evaluation-only set alone (`split`, e.g. heldout-letters): `build_corpus` over the real sources of
    that split and no TTS, so its files and rows are those the whole corpus has for the split. `heldout` is the
    corpus's held-out packages and voices (hedgewars' three), beside their sources' other voices."""
    if split == "heldout":
        chosen = [s for s in sources if not s.split and _may_hold(s, heldout_packages, heldout_speakers)]
        return build_corpus(out_dir, heldout_packages=heldout_packages, heldout_speakers=heldout_speakers,
                            sources=chosen, voices=[], words=[], sentences=[], seed=seed, list_files=list_files,
                            doc_root=doc_root)
    chosen = [s for s in sources if s.split == split]
    if not split.startswith("heldout-") or not chosen:
        sets = ", ".join(sorted({"heldout", *(s.split for s in sources if s.split)}))
        raise ValueError(f"no evaluation set {split!r} (sets: {sets})")
    return build_corpus(out_dir, heldout_packages=(), heldout_speakers=(), sources=chosen, voices=[], words=[],
                        sentences=[], seed=seed, list_files=list_files, doc_root=doc_root)


def _may_hold(src: RealSource, packages: Sequence[str], speakers: Sequence[str]) -> bool:
    """Whether a source is a held-out package or names a held-out speaker ("hedgewars-{voice}": hedgewars-Pirate)."""
    prefix = src.speaker.split("{")[0]
    return src.package in packages or any(s == src.speaker or ("{" in src.speaker and s.startswith(prefix))
                                          for s in speakers)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="build training speech: real prompt sets + TTS voices, all labelled")
    p.add_argument("out", type=Path)
    p.add_argument("--words", type=int, default=1000, help="CMUdict words, each in every TTS voice")
    p.add_argument("--sentences", type=int, default=300, help="license-text sentences, each in every TTS voice")
    p.add_argument("--dev-words", type=int, default=100)
    p.add_argument("--dev-fraction", type=float, default=0.05)
    p.add_argument("--heldout-package", action="append", default=None,
                   help=f"real package kept out of training (split 'heldout'; repeatable; default "
                        f"{', '.join(DEFAULT_HELDOUT_PACKAGES)}); '' for none")
    p.add_argument("--heldout-speaker", action="append", default=None,
                   help=f"real speaker kept out of training (repeatable; default "
                        f"{', '.join(DEFAULT_HELDOUT_SPEAKERS)}); '' for none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only-split", choices=("heldout", *HELDOUT_SETS), default=None,
                   help="build only this evaluation set (its real sources, no TTS): the same files and rows as in "
                        "the whole corpus; 'heldout': the held-out packages and speakers (--heldout-package, "
                        "--heldout-speaker) with their sources' other voices")
    args = p.parse_args(argv)
    packages = DEFAULT_HELDOUT_PACKAGES if args.heldout_package is None else [p for p in args.heldout_package if p]
    speakers = DEFAULT_HELDOUT_SPEAKERS if args.heldout_speaker is None else [s for s in args.heldout_speaker if s]
    if args.only_split:
        return espeak_corpus.run_cli(build_heldout_set(args.out, args.only_split, seed=args.seed,
                                                       heldout_packages=packages, heldout_speakers=speakers))
    job = build_corpus(args.out, args.words, args.sentences, args.dev_words, args.dev_fraction, packages, speakers,
                       seed=args.seed)
    return espeak_corpus.run_cli(job)


if __name__ == "__main__":
    raise SystemExit(main())
