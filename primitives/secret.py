"""A wrapper that keeps secrets (keys, blinds, unmasked shares, seeds) out of logs and reprs."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Secret(Generic[T]):
    """Holds a secret value; ``repr``/``str`` are redacted. Call :meth:`reveal` to use it."""

    __slots__ = ("_value",)

    def __init__(self, value: T) -> None:
        self._value = value

    def reveal(self) -> T:
        return self._value

    def __repr__(self) -> str:
        return "Secret(<redacted>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and bool(self._value == other._value)

    def __hash__(self) -> int:
        return hash(("Secret", id(self)))
