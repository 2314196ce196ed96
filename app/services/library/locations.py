"""The user's library locations: the folders Earshot knows by name, which of them are searched together, saved
sets of them, and the folders opened lately (no Qt).

One JSON file in the user's config folder (`user_config_dir("earshot")/locations.json`, or $EARSHOT_LOCATIONS):
`{"locations": [{"name", "path"}], "active": [name, ...], "sets": {name: [name, ...]}, "recent": [path, ...]}`.
Each location keeps its own catalog as a single library does (catalog.py); this file only lists them. A
location's name is how results, the folder tree and the CLI say where a sound is, so names are unique and hold
no '/'. Written atomically; a file that cannot be read is set aside (".damaged") and said, never lost.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from platformdirs import user_config_dir

from core.files import atomic_path

FILE_NAME = "locations.json"
MAX_RECENT = 10
MAX_NAME = 80


@dataclass(frozen=True)
class Location:
    name: str
    path: Path  # absolute


def locations_file() -> Path:
    env = os.environ.get("EARSHOT_LOCATIONS")
    return Path(env) if env else Path(user_config_dir("earshot", appauthor=False)) / FILE_NAME


@dataclass
class Locations:
    locations: list[Location] = field(default_factory=list)
    active: list[str] = field(default_factory=list)  # the names searched together ([]: the first alone)
    sets: dict[str, list[str]] = field(default_factory=dict)
    recent: list[Path] = field(default_factory=list)  # folders opened, latest first
    file: Path | None = None  # where it is kept (None: not kept)
    problem: str = ""  # what was wrong with the file when it was read ("" : nothing)

    # -- reading and writing

    @classmethod
    def load(cls, file: str | os.PathLike[str] | None = None) -> Locations:
        path = Path(file) if file is not None else locations_file()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls._from(data, path)
        except FileNotFoundError:
            return cls(file=path)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            aside = path.with_name(path.name + ".damaged")
            try:
                os.replace(path, aside)
                where = f"set aside as {aside.name}"
            except OSError:
                where = "left as it is"
            return cls(file=path, problem=f"the list of library locations ({path}) could not be read ({e}); it "
                                          f"was {where} and the list starts empty")

    @classmethod
    def _from(cls, data: dict, path: Path) -> Locations:
        locs = [Location(str(d["name"]), Path(d["path"])) for d in data.get("locations", [])]
        names = {loc.name for loc in locs}
        return cls(locs, [n for n in data.get("active", []) if n in names],
                   {str(k): [n for n in v if n in names] for k, v in dict(data.get("sets", {})).items()},
                   [Path(p) for p in data.get("recent", [])][:MAX_RECENT], path)

    def save(self) -> None:
        if self.file is None:
            return
        self.file.parent.mkdir(parents=True, exist_ok=True)
        data = {"locations": [{"name": loc.name, "path": str(loc.path)} for loc in self.locations],
                "active": self.active, "sets": self.sets, "recent": [str(p) for p in self.recent]}
        with atomic_path(self.file) as tmp:
            tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")

    # -- the list

    def find(self, name_or_path: str | os.PathLike[str]) -> Location | None:
        """The location of this name, or of this folder."""
        text = os.fspath(name_or_path)
        for loc in self.locations:
            if loc.name == text:
                return loc
        folder = Path(os.path.abspath(text))
        return next((loc for loc in self.locations if loc.path == folder), None)

    def add(self, folder: str | os.PathLike[str], name: str | None = None) -> Location:
        """The folder as a location (named after it unless `name`; a folder already listed keeps its entry)."""
        path = Path(os.path.abspath(os.fspath(folder)))
        if not path.is_dir():
            raise ValueError(f"{path} is not a folder")
        known = next((loc for loc in self.locations if loc.path == path), None)
        if known is not None:
            return known
        loc = Location(self._free_name(name if name is not None else path.name or str(path)), path)
        self.locations.append(loc)
        return loc

    def remove(self, name: str) -> None:
        """Forget the location (its folder and its catalog are left as they are)."""
        loc = self._named(name)
        self.locations.remove(loc)
        self.active = [n for n in self.active if n != name]
        self.sets = {k: [n for n in v if n != name] for k, v in self.sets.items()}

    def rename(self, old: str, new: str) -> Location:
        loc = self._named(old)
        new = check_name(new)
        if new != old and any(other.name == new for other in self.locations):
            raise ValueError(f"a location is already called {new!r}")
        renamed = Location(new, loc.path)
        self.locations[self.locations.index(loc)] = renamed
        self.active = [new if n == old else n for n in self.active]
        self.sets = {k: [new if n == old else n for n in v] for k, v in self.sets.items()}
        return renamed

    def opened(self, folder: str | os.PathLike[str]) -> None:
        """Note the folder as opened now (the Recent list)."""
        path = Path(os.path.abspath(os.fspath(folder)))
        self.recent = [path, *[p for p in self.recent if p != path]][:MAX_RECENT]

    # -- searched together

    def choose(self, names: list[str]) -> None:
        """Search these locations together (in the list's order)."""
        for n in names:
            self._named(n)
        self.active = [loc.name for loc in self.locations if loc.name in names]

    def chosen(self) -> list[Location]:
        return [loc for loc in self.locations if loc.name in self.active]

    def save_set(self, set_name: str, names: list[str]) -> None:
        for n in names:
            self._named(n)
        if not names:
            raise ValueError("a set needs at least one location")
        self.sets[check_name(set_name)] = list(names)

    def of_set(self, set_name: str) -> list[Location]:
        if set_name not in self.sets:
            known = ", ".join(sorted(self.sets)) or "none saved yet"
            raise ValueError(f"no set of locations called {set_name!r} (sets: {known})")
        return [self._named(n) for n in self.sets[set_name]]

    def _named(self, name: str) -> Location:
        loc = next((x for x in self.locations if x.name == name), None)
        if loc is None:
            known = ", ".join(x.name for x in self.locations) or "none yet"
            raise ValueError(f"no library location called {name!r} (locations: {known})")
        return loc

    def _free_name(self, wanted: str) -> str:
        base = check_name(wanted.replace("/", "-").strip() or "Library")
        taken = {loc.name for loc in self.locations}
        name, n = base, 2
        while name in taken:
            name, n = f"{base} ({n})", n + 1
        return name


def check_name(name: str) -> str:
    """A location's name as it will be shown: trimmed, not empty, no '/', at most MAX_NAME characters."""
    text = name.strip()
    if not text:
        raise ValueError("a location's name cannot be empty")
    if "/" in text or "\\" in text:
        raise ValueError(f"a location's name cannot hold '/' or '\\' (got {text!r}): it starts folder paths")
    if len(text) > MAX_NAME or not text.isprintable():
        raise ValueError(f"a location's name must be printable and at most {MAX_NAME} characters")
    return text
