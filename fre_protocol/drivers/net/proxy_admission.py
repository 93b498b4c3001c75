"""The proxy's admission of users' requests: the credential (an HMAC of the round and the user
under the proxy's key), the refusal budget, and the checks and the logged write of each request
(at most the round's cap c of each kind per credential; envelope framing and recipients).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request

from fre_protocol.drivers.net.proxy_log import (
    OPEN1,
    OPEN2,
    PHASE1,
    PHASE2,
    REFUSAL_BUDGET,
    record_item,
    record_refusal,
)
from fre_protocol.drivers.net.wire import (
    RateLimitedError,
    RefusalBudgetError,
    UnauthorizedError,
    decode_batch,
)
from fre_protocol.messages import Role, SealedEnvelope, decode_as
from primitives.errors import DecodeError, InvalidParameterError, ProtocolStateError

#: A ticket: 16 random bytes in lowercase hex, never a row id (which would count requests).
TICKET = re.compile(r"[0-9a-f]{32}")


def check_ticket(ticket: str) -> str:
    if not TICKET.fullmatch(ticket):
        raise InvalidParameterError(f"ticket must be 32 lowercase hexadecimal characters, got {len(ticket)} characters")
    return ticket


def wait_seconds(request: Request) -> float | None:
    """The ``?wait=`` seconds a user asks to wait for a phase-1 answer; None when not asked.
    (The query string is parsed only when there is one: most requests carry none.)"""
    if not request.scope.get("query_string"):
        return None
    value = request.query_params.get("wait")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds >= 0:  # also refuses NaN
        raise InvalidParameterError(f"wait must be a number of seconds >= 0, got {value[:32]!r}")
    return seconds


def credential_token(key: bytes, round_id: str, user: str) -> str:
    """A user's credential for a round: ``user.MAC`` (HMAC-SHA-256 under the proxy's key)."""
    mac = hmac.digest(key, f"{round_id}/{user}".encode(), "sha256").hex()[:32]  # one call: checked per request
    return f"{user}.{mac}"


def read_credential_key(path: Path) -> bytes:
    data = path.read_bytes()
    if len(data) < 32:
        raise InvalidParameterError(f"credential key file must hold at least 32 bytes, got {len(data)}")
    return data


class Admission:
    """The admission half of :class:`~fre_protocol.drivers.net.proxy_service.ProxyService`: it
    reads the service's ``settings``, ``state``, ``commits``, ``_credential_key``, ``_phase``
    (the round's phase, moved only under the state's lock) and ``_refusals`` (per credential)."""

    settings: Any
    state: Any
    commits: Any
    _credential_key: bytes
    _phase: str
    _refusals: dict[str, int]

    def credential(self, request: Request) -> str:
        auth = request.headers.get("authorization", "")
        token = auth[7:] if auth.lower().startswith("bearer ") else ""
        user, _, _ = token.partition(".")
        expected = credential_token(self._credential_key, self.settings.round_id, user) if user else ""
        if not user or not hmac.compare_digest(token.encode(), expected.encode()):
            raise UnauthorizedError("a valid user credential (Authorization: Bearer) is required")
        return user

    def within_budget(self, user: str) -> None:
        """RefusalBudgetError (429) once ``user`` was refused :data:`REFUSAL_BUDGET` times this
        round: checked before its body is read, so such a request costs no work and no write."""
        if self._refusals.get(user, 0) >= REFUSAL_BUDGET:
            raise RefusalBudgetError(
                f"this credential was refused {REFUSAL_BUDGET} times in this round (the most a round allows); "
                "its requests are no longer read"
            )

    def admit(self, kind: str, user: str, body: bytes) -> list[tuple[int, str]]:
        """Log a user's request (its envelopes as items) in the next group commit; the items'
        ids and tickets. The same body again is idempotent (same items); a body of the same kind
        beyond the round's cap c is refused."""
        return self.commits.submit(self.admission(kind, user, body)).result(timeout=120)  # type: ignore[no-any-return]

    def admission(self, kind: str, user: str, body: bytes) -> Callable[[Any], Any]:
        """:meth:`admit`'s checks, run now; its write, returned for the next group commit
        (which the event loop awaits without a thread of its own)."""
        if kind == PHASE2:
            try:
                envelopes = decode_batch(body, limit=2)
            except DecodeError as exc:
                self._refuse(kind, user, body, exc)
                raise
            want = [Role.S_TAG, Role.S_SYN]
        else:
            envelopes, want = [body], [Role.S_TAG if kind == PHASE1 else Role.S_SYN]
        opened = []
        try:
            for data in envelopes:
                opened.append(decode_as(data, SealedEnvelope))
            if sorted(e.recipient for e in opened) != sorted(want):
                raise DecodeError(
                    f"{kind} must carry envelopes for {[r.label for r in want]}, got {[e.recipient.label for e in opened]}"
                )
        except DecodeError as exc:
            self._refuse(kind, user, body, exc)
            raise
        digest = hashlib.sha256(body).digest()
        open_phase = OPEN2 if kind == PHASE2 else OPEN1
        # A user holds c slots (design §4.6): c requests of each kind, padded to exactly c by the client.
        cap = self.settings.unit.cap

        def refused(conn: Any, error: Exception) -> Exception:
            self._refusals[user] = record_refusal(conn, kind, user, body, error)
            return error

        def write(conn: Any) -> Any:
            if self._phase != open_phase:  # read under the state's lock, as _set_phase writes it
                return refused(conn, ProtocolStateError(
                    f"{kind} requests are taken in {open_phase}, the round is in {self._phase}"
                ))
            rows = conn.execute(
                "SELECT id, ticket, digest FROM items WHERE kind = ? AND credential = ? ORDER BY id", (kind, user)
            ).fetchall()
            same = [(int(r[0]), str(r[1])) for r in rows if bytes(r[2]) == digest]
            if same:
                return same
            if len({bytes(r[2]) for r in rows}) >= cap:
                return refused(conn, RateLimitedError(
                    f"this credential already sent its {cap} {kind} request{'s' if cap > 1 else ''} in this round "
                    f"(the round's cap c = {cap})"
                ))
            return [
                record_item(conn, kind, user, digest, Role.USER.label, env.recipient.label, data)
                for data, env in zip(envelopes, opened, strict=True)
            ]

        return write

    def _refuse(self, kind: str, user: str, body: bytes, error: Exception) -> None:
        with self.state.transaction() as conn:
            self._refusals[user] = record_refusal(conn, kind, user, body, error)


__all__ = ["Admission", "check_ticket", "credential_token", "read_credential_key", "wait_seconds"]
