"""``fre-e2t costs --compare FAMILY=A,B``: both implementations' cost rows and the ratio, from one
process on one population (tiny here: the figures are not the point, the layout and the runs are)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fre_protocol.cli import main
from fre_protocol.costs import parse_compare
from primitives.errors import InvalidParameterError, UnknownComponentError

TINY = ["costs", "--num-users", "60", "--dim", "8", "--epsilon", "inf"]


@pytest.mark.parametrize("spec", ["channel=sealed-box,hpke", "shuffler=uniform,prf-sort"])
def test_compare_prints_both_columns_and_the_ratio(spec: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main([*TINY, "--compare", spec, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    family, a, b = parse_compare(spec)
    assert f"| operation | A: {a} | B: {b} | B/A | unit |" in out
    assert "Only ratios within this table compare" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "operation" not in line]
    assert any(line.startswith("| whole run |") and line.count("×") == 1 for line in rows)
    assert any("proxy forwarding" in line for line in rows)
    data = json.loads((tmp_path / "costs-compare.json").read_text())
    assert data["family"] == family and set(data["runs"]) == {a, b}
    assert data["runs"][b]["released_buckets"] == data["runs"][a]["released_buckets"]
    # The same sizes on the wire whichever implementation: both channels add 48 bytes.
    assert data["runs"][b]["upload_bytes"] == data["runs"][a]["upload_bytes"]


@pytest.mark.parametrize("spec", ["channel=sealed-box", "channel=hpke,hpke", "channel", "=a,b"])
def test_malformed_compare_is_refused(spec: str) -> None:
    with pytest.raises(InvalidParameterError):
        parse_compare(spec)


def test_unknown_names_are_refused_before_any_run() -> None:
    with pytest.raises(UnknownComponentError, match="channel must be one of"):
        parse_compare("channel=sealed-box,nope")
    with pytest.raises(UnknownComponentError, match="component family must be one of"):
        parse_compare("no_such_family=a,b")
    assert parse_compare("broadcast=full-list,ribbon") == ("broadcast", "full-list", "ribbon")  # a run family now
