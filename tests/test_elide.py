"""Long names cut to a column's width (app/ui/elide.py, Qt-free): what tells a name apart from the names around it
stays in view. Widths here are characters (a fixed-width font), the table measures with its font."""

from __future__ import annotations

from app.ui.elide import elide_folder, elide_name, pieces_html, shared_words, shown_text

BARN = "DOORWood_Creaky Old Barn Door {}_JOHNDOE_Recording{}.wav"
LIST = [BARN.format("Open Fast", "01"), BARN.format("Open Slow", "01"), BARN.format("Open Slow", "03"),
        BARN.format("Close Slow", "02"), "DOORMetl_Heavy Steel Bunker Door Slam Reverberant_JOHNDOE_Recording01.wav",
        "ANMLFarm_Sheep Bleat Single Close Perspective_JOHNDOE_Recording01.wav",
        "WATRBubl_Bubbles Rising Underwater Small Stream_JOHNDOE_Recording01.wav"]


def shown(names: list[str], width: int) -> list[str]:
    return [shown_text(n, elide_name(n, s, len, width)) for n, s in zip(names, shared_words(names), strict=True)]


def test_look_alike_names_keep_what_tells_them_apart() -> None:
    """A first-contact trial: at 1024x700 four barn doors read `DOORWood_…ing01.wav`, `DOORWood_…ing01.wav`, ...
    (cut in the middle: their description and take number gone). What they share gives way instead."""
    assert shown(LIST, 26)[:4] == ["DOORWood…Open Fast…01.wav", "DOORWood…Open Slow…01.wav",
                                   "DOORWood…Open Slow…03.wav", "DOORWood…Close Slow…02.wav"]
    assert shown(LIST, 24)[:4] == ["…Open Fast…01.wav", "…Open Slow…01.wav", "…Open Slow…03.wav",
                                   "…Close Slow…02.wav"]  # the family's first word (its category) goes last
    roomier = shown(LIST, 34)
    assert roomier[0] == "DOORWood_Creaky…Open Fast…01.wav"  # shared words come back as room allows, from the left
    assert roomier[4] == "DOORMetl_Heavy Steel Bunker…01.wav"  # no look-alike: its start, the creator's ID gone
    assert all(len(text) <= 34 for text in roomier)
    assert shown(LIST, 200) == LIST  # room enough: nothing cut


def test_a_name_without_look_alikes_keeps_its_start_and_its_take() -> None:
    names = ["tram_passing_over_wet_cobblestones_close_perspective_take_03.wav", "tram_bell_two_rings_short.wav",
             "regional_train_departing_platform_announcement_distant_take_01.wav"]
    assert shown(names, 24) == ["tram_passing_ove…_03.wav", "tram_bell_two…_short.wav", "regional_train_d…_01.wav"]
    assert shared_words(["only_one_name.wav"]) == [[]]


def test_the_matched_words_stay_marked_in_what_shows() -> None:
    name = LIST[1]
    pieces = elide_name(name, shared_words(LIST)[1], len, 26)
    slow = name.index("Slow")
    html = pieces_html(name, pieces, [(slow, slow + 4), (0, 4)])  # "Slow" shows, "DOOR" too
    assert html.count("<span") == 2 and ">Slow</span>" in html and ">DOOR</span>Wood…" in html
    assert html.replace("<span", "").count("…") == 2


def test_a_folder_keeps_its_pack_and_its_deepest_folders() -> None:
    """Issue 40: ".../sound/default/weapons" did not say which pack a result comes from."""
    folder = "Sound Effects/Commercial/JOHNDOE Field Recordings 2023/Doors/Wood/Barn"
    assert shown_text(folder, elide_folder(folder, len, 26)) == "Sound Effects…/Wood/Barn"
    pack = "FreedroidRPG 1.0/sound/default/weapons"
    assert shown_text(pack, elide_folder(pack, len, 30)) == "FreedroidRPG 1.0…/weapons"
    assert shown_text(folder, elide_folder(folder, len, 8)) == "So…/Barn"
    one = "A Very Long Vendor Pack Name Without Any Slash"
    assert shown_text(one, elide_folder(one, len, 20)) == "A Very …ut Any Slash"
    assert shown_text(pack, elide_folder(pack, len, 6)) == "…apons"  # too narrow for the pack: the end
