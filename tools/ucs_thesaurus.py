"""Write app/services/library/data/ucs_thesaurus.tsv from the UCS schedules in ../shared/data/ucs (21 languages).

One line per UCS subcategory: CatID, its head words (the English category and subcategory words, and each
language's subcategory words), and its synonyms in every language (single words, lower-cased, NFKC). UCS v8.2.1
by Tim Nielsen, Justin Drury, Kai Paquin and others; the normalised schedules are from iluvcapra/ucs-community,
CC0 1.0. `python -m tools.ucs_thesaurus [UCS_DIR] [OUT]`
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UCS_DIR = ROOT.parent / "shared" / "data" / "ucs"
OUT = ROOT / "app" / "services" / "library" / "data" / "ucs_thesaurus.tsv"
_WORD = re.compile(r"[^\W\d_]+")
HEADER = """# UCS (Universal Category System) v8.2.1 as a thesaurus: CatID, head words, synonyms (21 languages).
# UCS: Tim Nielsen, Justin Drury, Kai Paquin and others (https://universalcategorysystem.com); the schedules with
# their Synonyms are from https://github.com/iluvcapra/ucs-community (commit be76ca3), CC0 1.0 (public domain).
# Written by tools/ucs_thesaurus.py: single-word synonyms only, lower-cased and NFKC-normalised.
"""


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def single(term: str) -> str | None:
    found = words(term)
    return found[0] if len(found) == 1 and len(found[0]) >= 2 else None


def main(argv: list[str]) -> int:
    src = Path(argv[0]) if argv else UCS_DIR
    out = Path(argv[1]) if len(argv) > 1 else OUT
    heads: dict[str, list[str]] = {}
    syns: dict[str, list[str]] = {}
    for path in sorted(src.glob("*.json")):
        for e in json.loads(path.read_text(encoding="utf-8")):
            cat = e["CatID"]
            head = words(e["SubCategory"]) + (words(e["Category"]) if path.stem == "en" else [])
            heads.setdefault(cat, []).extend(w for w in head if w not in ("misc", "miscellaneous", "general"))
            syns.setdefault(cat, []).extend(s for s in map(single, e.get("Synonyms", [])) if s)
    lines = [f"{cat}\t{' '.join(dict.fromkeys(heads[cat]))}\t{' '.join(dict.fromkeys(syns[cat]))}"
             for cat in sorted(heads)]
    out.write_text(HEADER + "CatID\thead\tsynonyms\n" + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"{out}: {len(lines)} subcategories, {sum(len(set(s)) for s in syns.values())} synonyms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
