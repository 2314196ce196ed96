"""The caption corpus's synthetic sources, both always in the `train` split: General MIDI instruments and drums
rendered with fluidsynth from Debian's fluid-soundfont-gm ("a trumpet playing a low note", "a loud crash cymbal
hit"), and spoken words from flite and espeak-ng voices ("a man says hello")."""

from __future__ import annotations

import re
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core import audio as audio_path

# ---------------------------------------------------------------------------------------------- MIDI (fluidsynth)

GM_PROGRAMS = (
    "acoustic grand piano", "bright acoustic piano", "electric grand piano", "honky-tonk piano", "electric piano",
    "electric piano", "harpsichord", "clavinet", "celesta", "glockenspiel", "music box", "vibraphone", "marimba",
    "xylophone", "tubular bells", "dulcimer", "drawbar organ", "percussive organ", "rock organ", "church organ",
    "reed organ", "accordion", "harmonica", "tango accordion", "nylon string guitar", "steel string guitar",
    "jazz electric guitar", "clean electric guitar", "muted electric guitar", "overdriven guitar",
    "distortion guitar", "guitar harmonics", "acoustic bass", "fingered electric bass", "picked electric bass",
    "fretless bass", "slap bass", "slap bass", "synth bass", "synth bass", "violin", "viola", "cello",
    "contrabass", "tremolo strings", "pizzicato strings", "orchestral harp", "timpani", "string ensemble",
    "slow string ensemble", "synth strings", "synth strings", "choir aahs", "voice oohs", "synth voice",
    "orchestra hit", "trumpet", "trombone", "tuba", "muted trumpet", "french horn", "brass section", "synth brass",
    "synth brass", "soprano sax", "alto sax", "tenor sax", "baritone sax", "oboe", "english horn", "bassoon",
    "clarinet", "piccolo", "flute", "recorder", "pan flute", "blown bottle", "shakuhachi", "whistle", "ocarina",
    "square wave synth lead", "sawtooth synth lead", "calliope synth lead", "chiff synth lead",
    "charang synth lead", "synth voice lead", "fifths synth lead", "bass and synth lead", "new age synth pad",
    "warm synth pad", "polysynth pad", "choir synth pad", "bowed synth pad", "metallic synth pad", "halo synth pad",
    "sweep synth pad", "rain synth effect", "soundtrack synth effect", "crystal synth effect",
    "atmosphere synth effect", "brightness synth effect", "goblins synth effect", "echoes synth effect",
    "sci-fi synth effect", "sitar", "banjo", "shamisen", "koto", "kalimba", "bagpipe", "fiddle", "shanai",
    "tinkle bell", "agogo", "steel drums", "woodblock", "taiko drum", "melodic tom", "synth drum",
    "reverse cymbal", "guitar fret noise", "breath noise", "seashore", "bird tweet", "telephone ring",
    "helicopter", "applause", "gunshot",
)
GM_PERCUSSION = {
    35: "acoustic bass drum", 36: "bass drum", 37: "side stick", 38: "acoustic snare drum", 39: "hand clap",
    40: "electric snare drum", 41: "low floor tom", 42: "closed hi-hat", 43: "high floor tom",
    44: "pedal hi-hat", 45: "low tom", 46: "open hi-hat", 47: "low-mid tom", 48: "hi-mid tom",
    49: "crash cymbal", 50: "high tom", 51: "ride cymbal", 52: "chinese cymbal", 53: "ride bell", 54: "tambourine",
    55: "splash cymbal", 56: "cowbell", 57: "crash cymbal", 58: "vibraslap", 59: "ride cymbal", 60: "high bongo",
    61: "low bongo", 62: "muted high conga", 63: "open high conga", 64: "low conga", 65: "high timbale",
    66: "low timbale", 67: "high agogo", 68: "low agogo", 69: "cabasa", 70: "maracas", 71: "short whistle",
    72: "long whistle", 73: "short guiro", 74: "long guiro", 75: "claves", 76: "high wood block",
    77: "low wood block", 78: "muted cuica", 79: "open cuica", 80: "muted triangle", 81: "open triangle",
}
_ARTICLE = re.compile(r"^[aeiou]")


def _a(noun: str) -> str:
    return ("an " if _ARTICLE.match(noun) else "a ") + noun


def midi_file(events: Sequence[tuple[int, bytes]], ticks_per_beat: int = 480) -> bytes:
    """A format-0 Standard MIDI File from (delta ticks, event bytes) pairs (tempo: the default 120 bpm)."""
    def varlen(n: int) -> bytes:
        out = [n & 0x7F]
        while n > 0x7F:
            n >>= 7
            out.insert(0, (n & 0x7F) | 0x80)
        return bytes(out)

    track = b"".join(varlen(dt) + ev for dt, ev in events) + b"\x00\xff\x2f\x00"
    header = b"MThd" + struct.pack(">IHHH", 6, 0, 1, ticks_per_beat)
    return header + b"MTrk" + struct.pack(">I", len(track)) + track


@dataclass
class MidiClip:
    name: str
    caption: str
    midi: bytes


def midi_plan() -> list[MidiClip]:
    """Notes and chords for the 128 GM programs (channel 1), soft and loud hits of the GM drums (channel 10)."""
    clips: list[MidiClip] = []
    hold, tail = 960, 960  # 1 s note at 120 bpm, 1 s of release
    for program, name in enumerate(GM_PROGRAMS):
        pc = bytes([0xC0, program])
        for label, notes in (("a low note", (48,)), ("a note", (60,)), ("a high note", (72,)),
                             ("a chord", (60, 64, 67))):
            on = [(0, bytes([0x90, n, 100])) for n in notes]
            off = [(hold if i == 0 else 0, bytes([0x80, n, 0])) for i, n in enumerate(notes)]
            end = [(tail, b"\xff\x01\x00")]  # an empty text event keeps the release tail in the render
            clips.append(MidiClip(f"gm{program:03d}-{label.split()[-1]}-{notes[0]}",
                                  f"{_a(name)} playing {label}", midi_file([(0, pc), *on, *off, *end])))
    for key, name in GM_PERCUSSION.items():
        for label, vel in (("soft", 45), ("loud", 120)):
            ev = [(0, bytes([0x99, key, vel])), (240, bytes([0x89, key, 0])), (1200, b"\xff\x01\x00")]
            clips.append(MidiClip(f"drum{key:02d}-{label}", f"{_a(label)} {name} hit", midi_file(ev)))
    return clips


def render_midi(midi: bytes, soundfont: Path, sample_rate: int = 44100) -> np.ndarray:
    """fluidsynth fast render -> mono float32 (N,), trailing silence trimmed."""
    with tempfile.TemporaryDirectory() as tmp:
        mid, wav = Path(tmp) / "in.mid", Path(tmp) / "out.wav"
        mid.write_bytes(midi)
        subprocess.run(["fluidsynth", "-ni", "-q", "-g", "0.8", "-r", str(sample_rate), "-F", str(wav),
                        str(soundfont), str(mid)], check=True, capture_output=True, timeout=60)
        wave = audio_path.decode_bytes(wav.read_bytes(), name="fluidsynth's render").audio
    return trim_silence(wave)


def trim_silence(wave: np.ndarray, threshold: float = 1e-3) -> np.ndarray:
    loud = np.flatnonzero(np.abs(wave) > threshold)
    return wave[: loud[-1] + 1] if loud.size else wave[:0]


# ---------------------------------------------------------------------------------------------- TTS

TTS_WORDS = (
    "hello", "goodbye", "yes", "no", "stop", "go", "left", "right", "up", "down", "open", "close", "start",
    "finish", "help", "welcome", "thank you", "please", "sorry", "ready", "wait", "again", "cancel", "play",
    "pause", "next", "back", "menu", "game over", "you win", "you lose", "level up", "try again", "well done",
    "watch out", "fire", "run", "jump", "attack", "retreat", "danger", "warning", "error", "success", "alarm",
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "zero", "hundred",
    "red", "green", "blue", "yellow", "black", "white", "orange", "purple", "dog", "cat", "bird", "horse", "cow",
    "water", "rain", "thunder", "music", "door", "phone", "computer", "car", "train", "bell", "clock", "morning",
    "night", "today", "tomorrow", "monday", "friday", "good morning", "good night", "how are you", "excuse me",
    "come here", "look", "listen", "quiet", "louder", "faster", "slower", "north", "south", "east", "west",
)
FLITE_VOICES = {"kal": "man", "awb": "man", "rms": "man", "slt": "woman"}
ESPEAK_VOICES = {"en-us+m1": "man", "en-us+m3": "man", "en-gb+m2": "man", "en-us+f1": "woman",
                 "en-us+f3": "woman", "en-gb+f2": "woman"}


@dataclass
class TtsClip:
    package: str
    voice: str
    gender: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.voice.replace('+', '_')}-{self.text.replace(' ', '_')}"

    @property
    def caption(self) -> str:
        return f"a {self.gender} says {self.text}"


def tts_plan() -> list[TtsClip]:
    clips = [TtsClip("flite", v, g, w) for v, g in FLITE_VOICES.items() for w in TTS_WORDS]
    return clips + [TtsClip("espeak-ng", v, g, w) for v, g in ESPEAK_VOICES.items() for w in TTS_WORDS]


def synthesise(clip: TtsClip) -> bytes:
    """One utterance -> the wav file its engine writes."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "out.wav"
        if clip.package == "flite":
            cmd = ["flite", "-voice", clip.voice, "-t", clip.text, "-o", str(wav)]
        else:
            cmd = ["espeak-ng", "-v", clip.voice, "-w", str(wav), clip.text]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)
        return wav.read_bytes()
