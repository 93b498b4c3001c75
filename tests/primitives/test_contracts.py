"""Components are checked against their family's Protocol when a run's components are built."""

from __future__ import annotations

from typing import Any

import pytest

from fre_protocol.components import build_components
from primitives import registry
from primitives.contracts import FAMILY_PROTOCOLS, check_component, contract_members, protocol_of
from primitives.errors import ComponentContractError, InvalidParameterError
from primitives.randomness import RandomSource


class NoShuffle:
    """A shuffler that forgot its one method."""

    name = "no-shuffle"

    def permute(self, items: Any, rng: RandomSource) -> list[Any]:
        return list(items)


class ShuffleWrongArity:
    name = "wrong-arity"

    def shuffle(self, items: Any) -> list[Any]:  # the protocol passes (items, rng)
        return list(items)


class ShuffleExtraRequired:
    name = "extra-required"

    def shuffle(self, items: Any, rng: RandomSource, key: bytes) -> list[Any]:
        return list(items)


class ShuffleWithDefaults:
    name = "with-defaults"

    def shuffle(self, items: Any, rng: RandomSource | None = None, *, rounds: int = 3) -> list[Any]:
        return list(items)


class NotADummyGenerator:
    def __init__(self, epsilon0: float, delta0: float, sensitivity: int) -> None:
        self.epsilon0, self.delta0, self.shift = epsilon0, delta0, 1

    def sample(self, size: int, rng: RandomSource) -> list[int]:
        return [0] * size


@pytest.fixture
def plug(monkeypatch: pytest.MonkeyPatch) -> Any:
    def add(family: str, name: str, cls: type) -> None:
        monkeypatch.setitem(registry._ENTRIES[family], name, f"{__name__}:{cls.__name__}")

    return add


def test_a_shuffler_missing_its_method_is_refused_at_build(plug: Any) -> None:
    plug("shuffler", "no-shuffle", NoShuffle)
    with pytest.raises(ComponentContractError) as info:
        build_components({"shuffler": "no-shuffle"})
    message = str(info.value)
    assert "shuffler" in message and "'no-shuffle'" in message and "missing method shuffle" in message
    assert isinstance(info.value, InvalidParameterError)


@pytest.mark.parametrize("cls", [ShuffleWrongArity, ShuffleExtraRequired])
def test_a_shuffler_of_the_wrong_arity_is_refused(plug: Any, cls: type) -> None:
    plug("shuffler", "bad", cls)
    with pytest.raises(ComponentContractError, match=r"shuffler 'bad'.*method shuffle"):
        build_components({"shuffler": "bad"})


def test_optional_extras_are_accepted() -> None:
    check_component("shuffler", "with-defaults", ShuffleWithDefaults())


def test_a_factory_class_is_checked_before_any_round(plug: Any) -> None:
    plug("dummy_generator", "not-one", NotADummyGenerator)
    with pytest.raises(ComponentContractError, match=r"dummy_generator 'not-one'.*missing method dummy_plan"):
        build_components({"dummy_generator": "not-one"})


def test_missing_data_attributes_are_named_on_built_components() -> None:
    class Bare:
        def shuffle(self, items: Any, rng: RandomSource) -> list[Any]:
            return list(items)

    with pytest.raises(ComponentContractError, match="missing attribute 'name'"):
        check_component("shuffler", "bare", Bare())


def test_every_built_in_meets_its_contract() -> None:
    comps = build_components()
    for family in ("secret_sharing", "ddg_encoder", "dummy_generator"):
        assert comps.names[family]
    for family in FAMILY_PROTOCOLS:
        for name in registry.names(family):
            factory = registry.resolve(family, name)
            if isinstance(factory, type):
                check_component(family, name, factory, built=False)


def test_contracts_list_only_what_the_protocol_calls() -> None:
    """Methods that nothing in the protocol calls were taken out of the Protocols (issue 33)."""
    assert set(contract_members(protocol_of("shuffler"))[0]) == {"shuffle"}
    channel = set(contract_members(protocol_of("channel"))[0])
    assert channel == {"generate_keypair", "prepare_seals", "skip_seals", "seal_prepared", "try_open_many"}
    assert "finalize" not in contract_members(protocol_of("oprf"))[0]
    dummy = contract_members(protocol_of("dummy_generator"))
    assert set(dummy[0]) == {"dummy_plan"} and set(dummy[1]) == {"epsilon0", "delta0", "shift"}
