"""One vocabulary of flags across the sub-commands (docs/cli.md), checked on ``build_parser()``:
every option has help that shows its default, no visible option has a retired name, progress is
one switch, ``--out`` is a directory, and each old spelling parses as its new one with one note."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.cli import COMMANDS, build_parser, main

#: Spellings of the last release, now hidden aliases (docs/cli.md, "Deprecated spellings").
RETIRED = ("--quiet", "--transcript", "--users", "--budget", "--engine", "--user-processes", "--dask-workers", "--n")
SHOWS_DEFAULT = re.compile(r"[(;] ?default\b|default:", re.IGNORECASE)  # "(default 2)", "; default 0", "default: …"


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


PARSERS = command_parsers()


def visible_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction)]


def plain_switch(action: argparse.Action) -> bool:
    """Off unless given: nothing to show as a default."""
    return action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction)


def one_of_required(parser: argparse.ArgumentParser) -> set[argparse.Action]:
    """Options of a required either-or group (``--embeddings`` or ``--demo``): one must be given."""
    return {a for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_visible_option_has_help(name: str) -> None:
    missing = [a.option_strings[0] for a in visible_options(PARSERS[name]) if not (a.help or "").strip()]
    assert not missing, f"fre-e2t {name}: options without help: {missing}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_shows_every_default(name: str) -> None:
    parser = PARSERS[name]
    formatter = parser._get_formatter()
    exempt = one_of_required(parser)
    silent = [
        a.option_strings[0] for a in visible_options(parser)
        if not (a.required or a in exempt or plain_switch(a)) and not SHOWS_DEFAULT.search(formatter._expand_help(a))
    ]
    assert not silent, f"fre-e2t {name}: --help shows no default for {silent}"
    text = parser.format_help()
    assert "default: None" not in text and "default: []" not in text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_visible_option_has_a_retired_name(name: str) -> None:
    used = [s for a in visible_options(PARSERS[name]) for s in a.option_strings if s in RETIRED]
    assert not used, f"fre-e2t {name}: retired names still shown: {used}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_progress_is_one_convention(name: str) -> None:
    for action in visible_options(PARSERS[name]):
        if any("progress" in s or "quiet" in s for s in action.option_strings):
            assert isinstance(action, argparse.BooleanOptionalAction), (name, action.option_strings)
            assert action.option_strings == ["--progress", "--no-progress"] and action.dest == "progress"
            assert isinstance(action.default, bool)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_out_is_a_directory(name: str) -> None:
    action = PARSERS[name]._option_string_actions.get("--out")
    if action is not None:
        assert action.metavar == "DIR" and "directory" in (action.help or ""), (name, action.metavar, action.help)


def test_progress_defaults_are_unchanged() -> None:
    """On for the long text commands, off where it was off."""
    defaults = {name: PARSERS[name].get_default("progress") for name in COMMANDS}
    assert {n for n, d in defaults.items() if d is True} == {"synthesize", "invert", "bench-inversion", "experiment"}
    assert {n for n, d in defaults.items() if d is False} == {"mechanism", "simulate", "costs"}


# (command, the other arguments, the old spelling, the new one)
ALIASES = [
    ("synthesize", ["--corpus", "healthtweets", "--epsilon", "8", "--out", "o"], ["--quiet"], ["--no-progress"]),
    ("synthesize", ["--corpus", "healthtweets", "--epsilon", "8", "--out", "o"], ["--budget", "small"],
     ["--search-budget", "small"]),
    ("invert", ["--embeddings", "x.npy", "--out", "o"], ["--quiet"], ["--no-progress"]),
    ("invert", ["--embeddings", "x.npy", "--out", "o"], ["--budget", "rounds=2"], ["--search-budget", "rounds=2"]),
    ("bench-inversion", ["--out", "o"], ["--quiet"], ["--no-progress"]),
    ("experiment", ["utility", "--out", "o"], ["--quiet"], ["--no-progress"]),
    ("experiment", ["utility", "--out", "o"], ["--budget", "small"], ["--search-budget", "small"]),
    ("mechanism", ["--demo", "--out", "o"], ["--users", "u.txt"], ["--user-labels", "u.txt"]),
    ("simulate", ["--demo", "--out", "o"], ["--users", "u.txt"], ["--user-labels", "u.txt"]),
    ("simulate", ["--demo", "--out", "o"], ["--transcript", "sizes"], ["--transcript-mode", "sizes"]),
    ("simulate", ["--demo", "--out", "o"], ["--engine", "dask"], ["--driver", "dask"]),
    ("simulate", ["--demo", "--out", "o"], ["--engine", "inprocess"], []),
    ("simulate", ["--demo", "--out", "o", "--driver", "runner"], ["--engine", "inprocess"], []),
    ("simulate", ["--demo", "--out", "o", "--driver", "streaming"], ["--engine", "dask"], ["--driver", "dask"]),
    ("simulate", ["--demo", "--out", "o", "--driver", "dask"], ["--dask-workers", "3"], ["--processes", "3"]),
    ("simulate", ["--demo", "--out", "o"], ["--dask-workers", "3"], []),  # ignored off dask, as before
    ("simulate", ["--demo", "--out", "o", "--driver", "streaming"], ["--user-processes", "2"],
     ["--driver", "streaming-processes", "--processes", "2"]),
    ("simulate", ["--demo", "--out", "o"], ["--user-processes", "3", "--driver", "streaming"],
     ["--driver", "streaming-processes", "--processes", "3"]),
    ("simulate", ["--demo", "--out", "o", "--driver", "runner"], ["--user-processes", "0"], []),
    ("deploy-local", ["--embeddings", "x.npy", "--out", "o"], ["--users", "u.txt"], ["--user-labels", "u.txt"]),
    ("users", ["--config", "c.json", "--embeddings", "x.npy", "--credentials", "c.txt"], ["--users", "u.txt"],
     ["--user-labels", "u.txt"]),
    ("users", ["--config", "c.json", "--embeddings", "x.npy", "--credentials", "c.txt"], ["--transcript", "t.sqlite"],
     ["--transcript-file", "t.sqlite"]),
    ("costs", [], ["--n", "400"], ["--num-users", "400"]),
]


@pytest.mark.parametrize(("command", "base", "old", "new"), ALIASES,
                         ids=[f"{c} {' '.join(b)} {' '.join(o)}" for c, b, o, _ in ALIASES])
def test_an_old_spelling_parses_as_the_new_one_with_one_note(
    command: str, base: list[str], old: list[str], new: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    expected = parser.parse_args([command, *base, *new])
    assert capsys.readouterr().err == ""
    got = parser.parse_args([command, *base, *old])
    err = capsys.readouterr().err
    assert vars(got) == vars(expected)
    notes = err.splitlines()
    assert len(notes) == 1 and notes[0].startswith(f"fre-e2t {command}: {old[0]} is deprecated; use "), err


def test_the_engine_note_names_the_new_choice(capsys: pytest.CaptureFixture[str]) -> None:
    build_parser().parse_args(["simulate", "--demo", "--out", "o", "--engine", "dask"])
    assert capsys.readouterr().err == "fre-e2t simulate: --engine is deprecated; use --driver dask\n"


@pytest.mark.parametrize("argv", [
    ["--engine", "dask", "--driver", "runner"],
    ["--engine", "dask", "--user-processes", "2"],
    ["--user-processes", "2", "--driver", "runner"],
])
def test_old_combinations_refused_before_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["simulate", "--demo", "--out", "o", *argv])
    assert exc.value.code == 2


def test_processes_only_with_a_driver_that_has_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = tmp_path / "x.npy"
    np.save(x, np.eye(4, 8, dtype=np.float32))
    argv = ["simulate", "--embeddings", str(x), "--out", str(tmp_path / "o"), "--driver", "runner", "--processes", "2"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "fre-e2t simulate: error: --processes applies to --driver streaming-processes or dask, got --driver runner"
    )
