"""One recorded message in one party's view (design §6.7).

Every message is recorded in the view of the party that received it (and again in the view of the
proxy that relayed it), so the same wire message can appear under several ``view`` values with
different ``seq`` numbers. ``sender`` and ``receiver`` are *roles* (``"user"``, ``"S_tag"``,
``"S_syn"``, ``"proxy"``, ...), never user identifiers.

Size-only records [decision]: a message may be recorded without its bytes (``payload_recorded =
False``), e.g. when only wire volume matters or when the bytes are a secret outside seeded mode.
Then ``payload == b""`` and ``size`` is the wire size; otherwise ``size == len(payload)`` always.
Audits that scan payloads count size-only records separately instead of silently passing them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from primitives.errors import InvalidParameterError

ACCEPTED = "accepted"
REJECTED_PREFIX = "rejected:"

IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_.:\-]{0,127}")
"""Views, phases, roles and message types: a letter, then letters, digits, ``_ . : -`` (≤ 128)."""

_STATUS = re.compile(r"accepted|rejected:[A-Za-z_][A-Za-z0-9_.]{0,127}")


def check_identifier(name: str, value: object) -> str:
    """Return ``value`` if it is a valid identifier, else raise naming the field ``name``."""
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise InvalidParameterError(
            f"{name} must be an identifier (a letter, then up to 127 letters, digits or '_.:-'), "
            f"got {value!r}"
        )
    return value


def check_status(value: object) -> str:
    """Return ``value`` if it is ``"accepted"`` or ``"rejected:<ErrorType>"``."""
    if not isinstance(value, str) or not _STATUS.fullmatch(value):
        raise InvalidParameterError(
            f"status must be 'accepted' or 'rejected:<ErrorType>', got {value!r}"
        )
    return value


def rejected_status(error: BaseException | type[BaseException] | str) -> str:
    """``"rejected:<ErrorType>"`` for an exception, an exception class or a type name."""
    if isinstance(error, str):
        name = error
    elif isinstance(error, type):
        name = error.__name__
    else:
        name = type(error).__name__
    return check_status(REJECTED_PREFIX + name)


@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptEntry:
    """A message as one party saw it: ordered by ``seq`` within a transcript (design §6.7)."""

    seq: int
    view: str
    phase: str
    sender: str
    receiver: str
    message_type: str
    payload: bytes
    size: int
    status: str = ACCEPTED
    payload_recorded: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 0:
            raise InvalidParameterError(f"seq must be an int >= 0, got {self.seq!r}")
        check_identifier("view", self.view)
        check_identifier("phase", self.phase)
        check_identifier("sender", self.sender)
        check_identifier("receiver", self.receiver)
        check_identifier("message_type", self.message_type)
        check_status(self.status)
        if not isinstance(self.payload, bytes):
            raise InvalidParameterError(f"payload must be bytes, got {type(self.payload).__name__}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise InvalidParameterError(f"size must be an int >= 0, got {self.size!r}")
        if not isinstance(self.payload_recorded, bool):
            raise InvalidParameterError(
                f"payload_recorded must be a bool, got {self.payload_recorded!r}"
            )
        if self.payload_recorded:
            if self.size != len(self.payload):
                raise InvalidParameterError(
                    f"size must equal len(payload) = {len(self.payload)}, got {self.size}"
                )
        elif self.payload:
            raise InvalidParameterError(
                f"a size-only record (payload_recorded=False) must have payload b'', "
                f"got {len(self.payload)} bytes"
            )

    @property
    def accepted(self) -> bool:
        return self.status == ACCEPTED

    @property
    def error_type(self) -> str | None:
        """The error type name of a rejected message, ``None`` if it was accepted."""
        return None if self.accepted else self.status[len(REJECTED_PREFIX) :]

    def __repr__(self) -> str:
        # Payloads may be large; show their size and a short prefix only.
        shown = self.payload[:8].hex() + ("…" if len(self.payload) > 8 else "")
        recorded = "" if self.payload_recorded else ", payload_recorded=False"
        return (
            f"TranscriptEntry(seq={self.seq}, view={self.view!r}, phase={self.phase!r}, "
            f"sender={self.sender!r}, receiver={self.receiver!r}, "
            f"message_type={self.message_type!r}, size={self.size}, payload={shown!r}, "
            f"status={self.status!r}{recorded})"
        )
