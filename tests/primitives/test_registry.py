from __future__ import annotations

import pytest

from primitives import registry
from primitives.errors import InvalidParameterError, UnknownComponentError


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(UnknownComponentError) as info:
        registry.resolve("shuffler", "no-such-shuffler")
    assert "uniform" in str(info.value) and "no-such-shuffler" in str(info.value)
    assert isinstance(info.value, InvalidParameterError)


def test_unknown_family_lists_families() -> None:
    with pytest.raises(UnknownComponentError, match="family"):
        registry.names("nope")


def test_every_registered_target_resolves() -> None:
    for family in registry.families():
        for name in registry.names(family):
            assert callable(registry.resolve(family, name)), (family, name)


def test_users_can_register_their_own_component() -> None:
    registry.register("shuffler", "identity-for-test", "builtins:list")
    try:
        assert registry.create("shuffler", "identity-for-test") == []
    finally:
        registry.unregister("shuffler", "identity-for-test")
