"""The public conformance suite (fre_protocol.testing.conformance) on every built-in component.

Each parametrization runs ``check(family, name)`` in the fast tier: every statistical property at
α = 1e-6, so the whole file (under 40 statistical tests) fails by chance with probability below
4e-5 — and, the suite drawing from seeded sources, reproducibly for implementations that use the
given RandomSource.
"""

from __future__ import annotations

from typing import Any

import pytest

from fre_protocol.testing import conformance
from primitives import registry
from primitives.randomness import RandomSource

BUILT_INS = [(family, name) for family in sorted(conformance.PROPERTIES) for name in registry.names(family)]


@pytest.mark.parametrize(("family", "name"), BUILT_INS, ids=[f"{f}:{n}" for f, n in BUILT_INS])
def test_every_built_in_conforms(family: str, name: str) -> None:
    report = conformance.check(family, name)
    assert report.ok, "\n".join(report.lines())
    assert [o.prop for o in report.outcomes][0] == "contract"
    assert len(report.outcomes) == 1 + len(conformance.PROPERTIES[family])


def test_every_family_has_properties() -> None:
    """Every family with a Protocol (the protocol's primitives; the text side's families, such as
    the embedder, have none) has its properties in the suite."""
    from primitives.contracts import FAMILY_PROTOCOLS

    assert set(conformance.PROPERTIES) == set(FAMILY_PROTOCOLS) <= set(registry.families())


class BiasedShuffler:
    """Meets the contract but is not uniform: a random rotation (every item keeps its
    neighbour), which a marginal test alone would pass."""

    name = "rotation"

    def shuffle(self, items: Any, rng: RandomSource) -> list[Any]:
        k = int(rng.integers_below(max(1, len(items)), 1)[0]) if items else 0
        batch = list(items)
        return batch[k:] + batch[:k]


class LeakyShuffler(BiasedShuffler):
    def shuffle(self, items: Any, rng: RandomSource) -> list[Any]:
        return [object() for _ in items]


def test_the_suite_catches_a_non_uniform_shuffler() -> None:
    report = conformance.run_properties("shuffler", "rotation", BiasedShuffler(), conformance.PROPERTIES["shuffler"])
    failed = {o.prop for o in report.failures}
    assert failed == {"is uniform"}, "\n".join(report.lines())
    with pytest.raises(conformance.ConformanceError, match="joint positions"):
        report.raise_for_failures()


def test_the_suite_catches_a_shuffler_that_replaces_items() -> None:
    report = conformance.run_properties("shuffler", "leaky", LeakyShuffler(), conformance.PROPERTIES["shuffler"])
    assert "is a permutation" in {o.prop for o in report.failures}


def test_a_component_missing_a_method_fails_the_contract_first() -> None:
    report = conformance.run_properties("shuffler", "none", object(), conformance.PROPERTIES["shuffler"])
    assert not report.ok and [o.prop for o in report.outcomes] == ["contract"]
    assert "missing method shuffle" in report.outcomes[0].detail


def test_a_tampering_blind_channel_fails() -> None:
    """A channel that opens anything (no authentication) fails "refuses tampering"."""
    from primitives.channel import SealedBoxChannel

    class Unauthenticated(SealedBoxChannel):
        def try_open_many(self, private_key: Any, ciphertexts: Any) -> list[Any]:
            return [bytes(c[48:]) for c in ciphertexts]

    report = conformance.run_properties("channel", "bad", Unauthenticated(), conformance.PROPERTIES["channel"])
    assert "refuses tampering" in {o.prop for o in report.failures}
