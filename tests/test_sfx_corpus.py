"""The caption-corpus builder (training/sfx_corpus.py) on a tiny fake package tree: no network, no apt."""

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from training import sfx_captions as captions
from training import sfx_corpus as sc
from training import sfx_synthetic as synthetic

SR = 22050
DEP5 = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\nFiles: *\nLicense: CC-BY-SA-3.0\n"


def _tone(freq: float, seconds: float) -> np.ndarray:
    t = np.arange(int(SR * seconds)) / SR
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _fake_repo(tmp_path: Path) -> tuple[str, dict[str, Path]]:
    """Three packages (one reserved) as unpacked trees, and the apt-file listing that names their files."""
    trees = {}
    files = {
        "boom-data": {"usr/share/games/boom/sounds/BigExplosion_02.wav": _tone(220, 0.5),
                      "usr/share/games/boom/sounds/door/creak-take3.ogg": _tone(330, 0.4),
                      "usr/share/games/boom/sounds/music/theme.ogg": _tone(110, 31.0),  # too long
                      "usr/share/games/boom/sounds/broken.wav": None},  # undecodable
        "chime-sounds": {"usr/share/sounds/chime/gui/btn_click.flac": _tone(880, 0.2),
                         "usr/share/sounds/chime/copy_of_boom.wav": _tone(220, 0.5)},  # duplicate audio
        "ktuberling-data": {"usr/share/ktuberling/sounds/en/hat.wav": _tone(440, 0.3)},
    }
    lines = []
    for package, content in files.items():
        root = tmp_path / "repo" / package
        for rel, wave in content.items():
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if wave is None:
                dest.write_bytes(b"RIFF not really a wav")
            else:
                sf.write(dest, wave, SR, format=dest.suffix[1:].upper())
            lines.append(f"{package}: /{rel}")
        doc = root / "usr/share/doc" / package
        doc.mkdir(parents=True)
        (doc / "copyright").write_text(DEP5)
        trees[package] = root
    return "\n".join(lines) + "\n", trees


def _build(tmp_path: Path, listing: str, fetch, **settings) -> dict:
    job = sc.build_corpus(tmp_path / "out", sc.Settings(**settings), listing, midi=False, tts=False, fetch=fetch)
    events = []
    try:
        while True:
            events.append(next(job))
    except StopIteration as stop:
        assert events and all({"step", "total", "message"} <= set(e) for e in events)
        return stop.value


def test_builder_on_fake_packages(tmp_path):
    listing, trees = _fake_repo(tmp_path)
    fetched = []

    def fake_fetch(package: str, work: Path) -> Path:
        fetched.append(package)
        shutil.copytree(trees[package], work / "root")
        return work / "root"

    summary = _build(tmp_path, listing, fake_fetch, test_fraction=0.0, val_fraction=0.0)
    assert "ktuberling-data" not in fetched  # reserved: never even downloaded
    out = tmp_path / "out"
    rows = list(csv.DictReader(open(out / "captions.csv")))
    assert list(rows[0]) == list(sc.CSV_COLUMNS)
    by_caption = {r["caption"]: r for r in rows}
    # stem + folder words, numbers and take ids dropped, abbreviations expanded; long, broken, duplicate dropped
    assert set(by_caption) == {"big explosion", "door creak", "interface button click"}
    boom = by_caption["big explosion"]
    assert boom["source_package"] == "boom-data" and boom["license"] == "CC-BY-SA-3.0"
    assert boom["source_file"] == "usr/share/games/boom/sounds/BigExplosion_02.wav"
    assert (out / boom["path"]).read_bytes() == (trees["boom-data"] / boom["source_file"]).read_bytes()
    assert (out / "licenses/boom-data.copyright").read_text() == DEP5
    assert summary["clips"] == 3 and summary["packages"] == 2

    # resumable: finished packages are not fetched again and give the same rows
    def no_fetch(package: str, work: Path) -> Path:
        raise AssertionError(f"fetched {package} again")

    _build(tmp_path, listing, no_fetch, test_fraction=0.0, val_fraction=0.0)
    assert list(csv.DictReader(open(out / "captions.csv"))) == rows

    # an interrupted build can still write its finished packages, fetching nothing
    (out / ".state/chime-sounds.json").unlink()
    job = sc.build_corpus(out, sc.Settings(test_fraction=0.0, val_fraction=0.0), listing, midi=False, tts=False,
                          fetch=no_fetch, only_finished=True)
    for _ in job:
        pass
    partial = list(csv.DictReader(open(out / "captions.csv")))
    assert {r["source_package"] for r in partial} == {"boom-data"}


def test_frozen_aisfx_features_of_the_corpus(tmp_path):
    from core import aisfx_weights

    if aisfx_weights.find_checkpoint() is None:
        pytest.skip("aisfx wheel not installed")
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    listing, trees = _fake_repo(tmp_path)

    def fake_fetch(package: str, work: Path) -> Path:
        shutil.copytree(trees[package], work / "root")
        return work / "root"

    _build(tmp_path, listing, fake_fetch, test_fraction=0.0, val_fraction=0.0)
    job = sc.embed_aisfx(tmp_path / "out", chunk=2)
    try:
        while True:
            next(job)
    except StopIteration as stop:
        parts = stop.value
    assert len(parts) == 2
    loaded = [load_file(str(p)) for p in parts]
    feats = torch.cat([x["features"] for x in loaded])
    assert feats.shape == (3, 1024) and torch.isfinite(feats).all()
    assert sorted(torch.cat([x["rows"] for x in loaded]).tolist()) == [0, 1, 2]  # visited in a seeded random order


def test_split_is_by_package_and_recorded(tmp_path):
    listing, trees = _fake_repo(tmp_path)

    def fake_fetch(package: str, work: Path) -> Path:
        shutil.copytree(trees[package], work / "root")
        return work / "root"

    summary = _build(tmp_path, listing, fake_fetch, test_fraction=0.5, val_fraction=0.0, seed=3)
    rows = list(csv.DictReader(open(tmp_path / "out/captions.csv")))
    splits = {}
    for r in rows:
        splits.setdefault(r["source_package"], set()).add(r["split"])
    assert all(len(s) == 1 for s in splits.values())  # a package never spans splits
    recorded = json.loads((tmp_path / "out/splits.json").read_text())["packages_per_split"]
    assert {p for ps in recorded.values() for p in ps} == set(splits)
    assert recorded == summary["packages_per_split"]
    for package, (split,) in splits.items():
        assert split == sc.split_for_package(package, 0.0, 0.5, 3)


@pytest.mark.parametrize("package", ["tuxpaint-stamps-default", "ktuberling-data", "klettres",
                                     "asterisk-core-sounds-en-gsm", "KTuberling", "triplea-data"])
def test_reserved_packages_are_refused_everywhere(package, tmp_path):
    assert sc.is_reserved(package)
    assert package not in sc.find_sound_packages(f"{package}: /usr/share/x/a.wav\nok-pkg: /usr/share/b.wav\n")
    with pytest.raises(ValueError, match="reserved for evaluation"):
        sc.fetch_and_unpack(package, tmp_path)  # refused before apt is asked
    with pytest.raises(ValueError, match="reserved for evaluation"):
        sc.collect_package(tmp_path, package, [], tmp_path, sc.Settings(), sc.Deduper())
    assert not sc.is_reserved("asterisk-core-sounds-fr-wav") and not sc.is_reserved("tuxpaint")


def test_caption_rules():
    cases = {
        ("usr/share/games/lugaru/Sounds/RabbitAttack3.ogg", "lugaru-data"): "rabbit attack",
        ("usr/share/sounds/foo/sfx_expl_lrg_v2.wav", "foo"): "sound effect explosion large",
        ("usr/share/games/fillets-ng/sound/viking/en/dr-x-buch.ogg", "fillets-ng-data"): "viking dr buch",
        ("usr/share/foo/sounds/01.wav", "foo"): "",  # nothing meaningful left: skipped
        ("usr/share/games/bar/snd/youlose.ogg", "bar"): "you lose",  # run-together words split
        ("usr/share/games/bar/snd/gameover_2.ogg", "bar"): "game over",
        ("usr/share/games/bar/snd/aimedh.ogg", "bar"): "aimedh",  # no split covers it: kept whole
    }
    for (path, package), want in cases.items():
        assert captions.caption_from_path(path, package) == want


def test_license_summary():
    assert sc.license_summary(DEP5) == "CC-BY-SA-3.0"
    free_form = "This is free software.\nLicense:\n  released under the GNU General Public License, version 2.\n"
    assert sc.license_summary(free_form) == "GNU General Public License, version 2"
    assert sc.license_summary("Copyright Toby Smithe") == "see copyright file"  # no 'MIT' inside 'Smithe'


def test_audio_hash_sees_through_encoding(tmp_path):
    wave = np.round(_tone(500, 0.3) * 32767).astype(np.int16)  # the same samples, two containers
    sf.write(tmp_path / "a.wav", wave, SR)
    sf.write(tmp_path / "a.flac", wave, SR)
    hashes = {sc.audio_hash(*sc.decode((tmp_path / f).read_bytes())) for f in ("a.wav", "a.flac")}
    assert len(hashes) == 1
    with pytest.raises(ValueError, match="cannot decode"):
        sc.decode(b"garbage")


def test_midi_plan_and_render():
    plan = synthetic.midi_plan()
    assert len(plan) == 128 * 4 + 47 * 2
    captions = {c.caption for c in plan}
    assert "a trumpet playing a high note" in captions and "a loud crash cymbal hit" in captions
    assert all(c.midi.startswith(b"MThd") for c in plan)
    soundfont = Path("/usr/share/sounds/sf2/FluidR3_GM.sf2")
    if not soundfont.is_file() or not shutil.which("fluidsynth"):
        pytest.skip("fluidsynth / fluid-soundfont-gm not installed")
    wave = synthetic.render_midi(plan[56 * 4 + 1].midi, soundfont)  # a trumpet note, 1 s held
    assert 0.9 < len(wave) / 44100 < 4.0 and np.abs(wave).max() > 0.01


def test_tts_captions_say_who_speaks():
    plan = synthetic.tts_plan()
    assert {c.caption.split(" says ")[0] for c in plan} == {"a man", "a woman"}
    assert {c.package for c in plan} == {"flite", "espeak-ng"}
    assert sc.split_for_package("flite", 0.5, 0.5, 0) == "train"  # synthetic sources always train


def test_unpack_takes_sound_files_and_docs_only(tmp_path):
    """A real .deb built with dpkg-deb (no network): only sound files and docs come out, and the .deb goes."""
    if not shutil.which("dpkg-deb"):
        pytest.skip("dpkg-deb not available")
    import subprocess

    pkg = tmp_path / "build"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN/control").write_text("Package: fake-sounds\nVersion: 1.0\nArchitecture: all\n"
                                        "Maintainer: t <t@example.org>\nDescription: test\n")
    sounds = pkg / "usr/share/games/fake/Sounds"
    sounds.mkdir(parents=True)
    sf.write(sounds / "Door.WAV", _tone(300, 0.2), SR, format="WAV")
    (pkg / "usr/share/games/fake/level.dat").write_bytes(b"x" * 1000)
    (pkg / "usr/share/doc/fake-sounds").mkdir(parents=True)
    (pkg / "usr/share/doc/fake-sounds/copyright").write_text(DEP5)
    debs = tmp_path / "debs"
    debs.mkdir()
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(pkg), str(debs / "fake-sounds_1.0_all.deb")],
                   check=True, capture_output=True)
    root = sc.fetch_and_unpack("fake-sounds", tmp_path / "work", debs)
    assert (root / "usr/share/games/fake/Sounds/Door.WAV").is_file()
    assert (root / "usr/share/doc/fake-sounds/copyright").read_text() == DEP5
    assert not (root / "usr/share/games/fake/level.dat").exists()
    assert not any(debs.iterdir())


def test_the_search_libraries_packages_never_enter_a_corpus() -> None:
    """Every package a search library is made of (bench/data/search_libraries) is refused by the corpus builders:
    flightgear-data-base and torcs-data were unseen only because of the corpus's 300 MB download limit."""
    import json
    from pathlib import Path

    from training.reserved import SEARCH_BENCH_PACKAGES
    from training.student_data import excluded_package

    data = Path(__file__).resolve().parents[1] / "bench" / "data" / "search_libraries"
    packages = {json.loads(p.read_text())["package"] for p in data.glob("*/library.json")}
    assert packages and packages == set(SEARCH_BENCH_PACKAGES)  # a new library adds its package here
    listing = "".join(f"{p}: /usr/share/{p}/a.wav\n" for p in packages) + "ok-pkg: /usr/share/b.wav\n"
    assert set(sc.find_sound_packages(listing)) == {"ok-pkg"}
    assert all(excluded_package(p) for p in packages) and not excluded_package("ok-pkg")
