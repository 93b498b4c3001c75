"""A run's output files: canonical JSON (primitives.jsonsafe), written atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.outputs import prepare_out_dir, write_json_atomic, write_jsonl_atomic
from primitives.errors import InvalidInputError, InvalidParameterError


def test_json_and_jsonl_are_canonical_and_utf8(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "a" / "s.json", {"eps": math.inf, "n": np.int64(2), "p": tmp_path, "b": b"\x01"})
    assert (tmp_path / "a" / "s.json").read_text() == (
        "{\n" f'  "eps": "inf",\n  "n": 2,\n  "p": {json.dumps(str(tmp_path))},\n  "b": "01"\n' "}\n"
    )
    write_jsonl_atomic(tmp_path / "s.jsonl", [{"text": "naïve café", "d": np.float32(0.5)}, {"d": math.nan}])
    assert (tmp_path / "s.jsonl").read_bytes() == '{"text": "naïve café", "d": 0.5}\n{"d": "nan"}\n'.encode()


def test_nothing_is_left_behind_when_a_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="s.jsonl line 2"):
        write_jsonl_atomic(tmp_path / "s.jsonl", [{"ok": 1}, {"bad": object()}])
    assert list(tmp_path.iterdir()) == []


def test_out_dir_must_not_be_a_file(tmp_path: Path) -> None:
    assert prepare_out_dir(tmp_path / "new").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidParameterError, match="must be a directory"):
        prepare_out_dir(tmp_path / "file")
