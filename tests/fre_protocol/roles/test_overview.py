"""The roles' overview (``fre_protocol/roles/__init__.py``), the page a driver's author reads with
the reference driver, names every state and message of every role's transition table."""

from __future__ import annotations

import re

import pytest

import fre_protocol.roles as roles
from fre_protocol.roles.dummy_user import DUMMY_TRANSITIONS
from fre_protocol.roles.proxy import PROXY_TRANSITIONS
from fre_protocol.roles.synthesis_server import SYNTHESIS_TRANSITIONS
from fre_protocol.roles.tagging_server import TAGGING_TRANSITIONS
from fre_protocol.roles.user import USER_TRANSITIONS

TABLES = {
    "UserPopulation": USER_TRANSITIONS,
    "TaggingServer": TAGGING_TRANSITIONS,
    "SynthesisServer": SYNTHESIS_TRANSITIONS,
    "AnonymizingProxy": PROXY_TRANSITIONS,
    "DummyUser": DUMMY_TRANSITIONS,
}


def _row(name: str) -> str:
    """The overview's table row of role ``name`` (its continuation lines included)."""
    doc = roles.__doc__ or ""
    match = re.search(rf"``{name}``(.*?)(?=\n``|\n=====)", doc, flags=re.S)
    assert match is not None, f"the roles' overview has no row for {name}"
    return " ".join(match.group(1).split())


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_overview_names_every_state_of_each_role(name: str) -> None:
    row = _row(name)
    for state in TABLES[name].states:
        assert re.search(rf"\b{state.value}\b", row), f"{name}: state {state.value!r} missing from the overview"


@pytest.mark.parametrize("name", ["UserPopulation", "TaggingServer", "SynthesisServer", "DummyUser"])
def test_the_overview_names_every_message_of_each_role(name: str) -> None:
    row = _row(name)
    for message in TABLES[name].table:
        assert re.search(rf"\b{message}\b", row), f"{name}: message {message!r} missing from the overview"


def test_a_driver_author_reads_under_a_thousand_lines() -> None:
    """The roles' overview, the reference driver and the in-process moves it calls."""
    from pathlib import Path

    import fre_protocol.drivers.inprocess as inprocess
    import fre_protocol.drivers.local as local

    lines = sum(len(Path(m.__file__).read_text(encoding="utf-8").splitlines()) for m in (roles, inprocess, local))  # type: ignore[arg-type]
    assert lines < 1000, lines
