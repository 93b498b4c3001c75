"""Each role as an explicit state machine: its states and the messages it takes in each.

A role declares, once, an :class:`~enum.Enum` of its states and a :class:`Transitions` table: for
every message (a method that takes or produces a protocol message), the states it is accepted in
and the state each one leads to. The method checks the table before any work or recording
(:func:`step`): a message that does not fit the role's state is refused with
:class:`OutOfOrderError`, and the role is left exactly as it was. The state advances only when
the method returns.

Drivers only move messages; which message a role takes when is this table's, so every driver
(in-process, streaming, Dask, the networked services) is held to the same order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar, cast

from primitives.errors import ProtocolStateError

S = TypeVar("S", bound=Enum)
F = TypeVar("F", bound=Callable[..., Any])


class OutOfOrderError(ProtocolStateError):
    """A message came in a state of its role that does not take it (too early, too late, twice).

    ``role``, ``state`` (the Enum member), ``message`` and ``expected`` (the messages the role takes
    in that state) are kept as attributes; the text names all four."""

    def __init__(self, role: str, state: Enum, message: str, expected: tuple[str, ...]) -> None:
        self.role, self.state, self.message, self.expected = role, state, message, expected
        takes = ", ".join(expected) if expected else "nothing more"
        super().__init__(f"{role} in state {state.value!r} cannot take {message!r}; it expects: {takes}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable as raised (a Dask actor's or a worker process's error reaches the driver).
        return (type(self), (self.role, self.state, self.message, self.expected))


@dataclass(frozen=True)
class Transitions(Generic[S]):
    """A role's state machine as data: ``table[message][state]`` is the state that ``message``
    leads to from ``state``; a state missing from ``table[message]`` does not take it."""

    role: str
    initial: S
    table: Mapping[str, Mapping[S, S]]

    def __post_init__(self) -> None:
        kinds = {type(self.initial)} | {type(s) for moves in self.table.values() for pair in moves.items() for s in pair}
        if len(kinds) != 1:
            raise TypeError(f"{self.role}'s transitions mix state types: {sorted(k.__name__ for k in kinds)}")

    @property
    def states(self) -> tuple[S, ...]:
        return tuple(type(self.initial))

    def expected(self, state: S) -> tuple[str, ...]:
        """The messages taken in ``state``, in the table's order."""
        return tuple(message for message, moves in self.table.items() if state in moves)

    def after(self, state: S, message: str) -> S:
        """The state ``message`` leads to from ``state``, or :class:`OutOfOrderError`."""
        moves = self.table.get(message, {})
        if state not in moves:
            raise OutOfOrderError(self.role, state, message, self.expected(state))
        return moves[state]


class Stateful(Protocol):
    """A role object that holds its current state in ``_state`` and its table in ``TRANSITIONS``."""

    TRANSITIONS: Transitions[Any]
    _state: Any


def step(message: str | Callable[..., str]) -> Callable[[F], F]:
    """Decorate a role's method that takes or produces ``message``: check the role's state
    against its table first (refused: :class:`OutOfOrderError`, nothing done, nothing
    recorded), run the method, then move to the table's next state. ``message`` may be a
    function of the method's arguments (the proxy's messages are named by their phase)."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def checked(self: Stateful, *args: Any, **kwargs: Any) -> Any:
            name = message if isinstance(message, str) else message(*args, **kwargs)
            after = self.TRANSITIONS.after(self._state, name)
            out = fn(self, *args, **kwargs)
            self._state = after
            return out

        checked.__protocol_message__ = message  # type: ignore[attr-defined]
        return cast(F, checked)

    return decorate


__all__ = ["OutOfOrderError", "Stateful", "Transitions", "step"]
