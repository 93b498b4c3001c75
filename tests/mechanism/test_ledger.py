"""PrivacyLedger / LedgerTerm: validation, the flat JSON view, and round trips (INTERFACES, design §4.3)."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest

from mechanism.accounting import calibrate_noise
from mechanism.ledger import FLAT_KEYS, LedgerTerm, PrivacyLedger, json_safe, parse_float
from mechanism.params import FreParams
from primitives.errors import InvalidInputError, InvalidParameterError


def _term(name: str = "t", eps: float = 1.0, delta: float = 1e-9) -> LedgerTerm:
    return LedgerTerm(name=name, epsilon=eps, delta=delta, source="Lemma X", detail={"a": 1})


def test_flat_keys_and_terms_for_a_calibrated_ledger() -> None:
    ledger = calibrate_noise(FreParams.paper(8.0))
    out = ledger.to_dict()
    for key in FLAT_KEYS:
        assert key in out, key
    assert out["tau"] == 50.0
    assert out["sensitivity"] == pytest.approx(1.2)
    assert out["bucket_edge"] == pytest.approx(2 * 0.5 / math.sqrt(20))
    assert out["eps_fre"] == pytest.approx(2.77259, abs=1e-5)
    assert out["eps_agg"] == pytest.approx(8.0 - out["eps_fre"])
    assert [t["name"] for t in out["terms"]] == [
        "heavy_hitters",
        "sensitivity_failure",
        "centroid_gaussian",
    ]
    for t in out["terms"]:
        assert set(t) == {"name", "epsilon", "delta", "source", "detail"}
    assert out["terms"][0]["source"].startswith("Lemma 1")
    assert out["terms"][1]["source"].startswith("Lemma 2")
    assert out["terms"][2]["source"].startswith("Theorem 3")
    json.dumps(out, allow_nan=False)  # strict JSON


def test_flat_sensitivity_is_the_capped_one() -> None:
    capped = FreParams(radius=0.9, k=10, p_sample=0.7, budget_factor=1.5, sensitivity_ratio=4.0)
    out = calibrate_noise(capped).to_dict()
    assert out["sensitivity"] == 2.0 and out["delta_sens"] == 0.0
    assert out["params"]["clip"] == 1.0


def test_ledger_written_before_the_clip_keeps_its_flat_view() -> None:
    """An old ledger.json has no ``clip`` in its params and was accounted with Δ = u·r: it still
    gives τ and the bucket edge, and the Δ its own sensitivity term records."""
    params = FreParams(radius=0.9, k=10, p_sample=0.7, budget_factor=1.5, sensitivity_ratio=4.0)
    data = calibrate_noise(params).to_dict()
    del data["params"]["clip"]
    data["terms"][1]["detail"] = {"k": 10, "sensitivity": 3.6}  # the old term: Δ = u·r
    flat = PrivacyLedger.from_dict(data).flat()
    assert flat["tau"] == pytest.approx(70.0) and flat["sensitivity"] == pytest.approx(3.6)
    assert flat["bucket_edge"] == pytest.approx(2 * 0.9 / math.sqrt(10))


def test_infinite_epsilon_is_written_as_string() -> None:
    ledger = calibrate_noise(FreParams(epsilon=math.inf, p_sample=1.0))
    out = ledger.to_dict()
    assert out["epsilon"] == "inf"
    assert out["eps_fre"] == "inf"
    assert out["sigma"] == 0.0
    text = json.dumps(out, allow_nan=False)
    assert PrivacyLedger.from_dict(json.loads(text)) == ledger


@pytest.mark.parametrize("eps", [4.0, 8.0, 16.0])
def test_round_trip_through_json_and_pickle(eps: float) -> None:
    ledger = calibrate_noise(FreParams.paper(eps))
    again = PrivacyLedger.from_dict(json.loads(json.dumps(ledger.to_dict(), allow_nan=False)))
    assert again == ledger
    assert pickle.loads(pickle.dumps(ledger)) == ledger


def test_term_lookup() -> None:
    ledger = calibrate_noise(FreParams.paper(4.0))
    assert ledger.term("sensitivity_failure").epsilon == 0.0
    with pytest.raises(KeyError, match="no ledger term named 'nope'"):
        ledger.term("nope")


def test_missing_terms_give_nan_strings() -> None:
    ledger = PrivacyLedger(
        terms=(_term(),),
        epsilon=1.0,
        delta=1e-9,
        sigma=math.nan,
        noise_multiplier=math.nan,
        composition="one term",
        params={},
    )
    out = ledger.to_dict()
    assert out["eps_fre"] == "nan" and out["tau"] == "nan" and out["sigma"] == "nan"
    json.dumps(out, allow_nan=False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": -1.0}, "t.epsilon must be"),
        ({"epsilon": math.nan}, "t.epsilon must be"),
        ({"delta": 1.5}, r"t.delta must be in \[0, 1.0\]"),
        ({"delta": -1e-9}, "t.delta must be"),
        ({"name": ""}, "term name"),
        ({"source": ""}, "source must name"),
    ],
)
def test_term_validation(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {"name": "t", "epsilon": 1.0, "delta": 0.0, "source": "x"}
    base.update(kwargs)
    with pytest.raises(InvalidParameterError, match=match):
        LedgerTerm(**base)  # type: ignore[arg-type]


def test_duplicate_term_names_rejected() -> None:
    with pytest.raises(InvalidParameterError, match="unique"):
        PrivacyLedger(
            terms=(_term(), _term()),
            epsilon=2.0,
            delta=0.0,
            sigma=0.0,
            noise_multiplier=0.0,
            composition="",
            params={},
        )


def test_detail_is_copied_and_numpy_scalars_accepted() -> None:
    detail = {"a": 1}
    term = LedgerTerm(
        name="t", epsilon=np.float64(0.5), delta=np.float32(1e-7), source="s", detail=detail
    )
    detail["a"] = 2
    assert term.detail["a"] == 1
    assert isinstance(term.epsilon, float) and isinstance(term.delta, float)


def test_json_safe_and_parse_float() -> None:
    assert json_safe({"x": np.array([1.0, np.inf]), "y": (np.int64(3), b"\x01")}) == {
        "x": [1.0, "inf"],
        "y": [3, "01"],
    }
    assert json_safe(-math.inf) == "-inf"
    assert math.isinf(parse_float("inf")) and parse_float("-inf") < 0
    assert math.isnan(parse_float("nan"))
    assert parse_float(2) == 2.0
    with pytest.raises(InvalidInputError):
        parse_float("many")
    with pytest.raises(InvalidInputError):
        json_safe(object())


def test_from_dict_missing_key() -> None:
    data = calibrate_noise(FreParams.paper(4.0)).to_dict()
    del data["terms"]
    with pytest.raises(InvalidInputError, match="'terms'"):
        PrivacyLedger.from_dict(data)
