"""The one canonical JSON form (primitives.jsonsafe): every value fre-e2t writes goes through it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from primitives.errors import InvalidInputError
from primitives.jsonsafe import json_safe


def test_every_kind_of_value_has_one_spelling() -> None:
    value = {
        "none": None,
        "flag": np.bool_(True),
        "int": np.int64(3),
        "float": np.float32(0.5),
        "inf": math.inf,
        "-inf": np.float64(-np.inf),
        "nan": math.nan,
        "array": np.array([[1.0, np.inf], [2.0, -np.inf]]),
        "tuple": (1, "a"),
        "bytes": b"\x00\xab",
        "bytearray": bytearray(b"\x01"),
        "path": Path("runs") / "a.json",
        1: "int key",
        2.5: "float key",
        b"\x0f": "bytes key",
    }
    assert json_safe(value) == {
        "none": None,
        "flag": True,
        "int": 3,
        "float": 0.5,
        "inf": "inf",
        "-inf": "-inf",
        "nan": "nan",
        "array": [[1.0, "inf"], [2.0, "-inf"]],
        "tuple": [1, "a"],
        "bytes": "00ab",
        "bytearray": "01",
        "path": str(Path("runs") / "a.json"),
        "1": "int key",
        "2.5": "float key",
        "0f": "bytes key",
    }
    out = json_safe(value)
    assert type(out["int"]) is int and type(out["float"]) is float and type(out["flag"]) is bool
    json.dumps(out, allow_nan=False)  # strict JSON


def test_refusals_name_the_value() -> None:
    with pytest.raises(InvalidInputError, match=r"run\['x'\] must be JSON-safe .* got object"):
        json_safe({"x": object()}, where="run")
    with pytest.raises(InvalidInputError, match="keys must be str"):
        json_safe({1: "a"}, str_keys=True)
    with pytest.raises(InvalidInputError, match="keys must be str"):
        json_safe({(1, 2): "a"})
    with pytest.raises(InvalidInputError, match="two keys spelled '1'"):
        json_safe({1: "a", "1": "b"})


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_json)
def test_json_values_are_their_own_canonical_form(value: object) -> None:
    assert json_safe(value) == value
    assert json_safe(json_safe(value)) == json_safe(value)
