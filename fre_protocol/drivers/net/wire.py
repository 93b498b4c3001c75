"""What travels between services besides the protocol's messages: batches of messages, and the
mapping of typed errors to HTTP statuses.

A batch body is ``count (u32) || (length (u32) || bytes)*``, the length-prefixed framing the
messages already use (:mod:`fre_protocol.messages`), as ``application/octet-stream``. Every error
a service returns is a JSON body ``{"error": <type>, "detail": <message>}`` whose type is the
library's exception class, so a client can tell a malformed body (400) from a wrong phase (409)
without parsing prose.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from primitives.errors import (
    DecodeError,
    FreError,
    InvalidInputError,
    InvalidParameterError,
    ProtocolStateError,
    RateLimitedError,
    VerificationError,
)

OCTETS = "application/octet-stream"
#: Header carrying the sender's idempotency key for one batch or one user request.
REQUEST_ID = "fre-request-id"
#: Header carrying the round id on every request (a request for another round is refused).
ROUND_ID = "fre-round-id"
#: Largest batch body a server reads (a 768-d share batch of 4096 users is ~20 MB).
MAX_BATCH_BODY = 256 << 20
#: Largest body a user may send the proxy (two sealed 768-d shares ≈ 9 kB; a DLEQ batch
#: answer is downloaded, never uploaded).
MAX_USER_BODY = 64 << 10
MAX_ITEMS = 1 << 20


class TooLargeError(InvalidInputError):
    """A body longer than the endpoint accepts (HTTP 413)."""


class UnauthorizedError(FreError):
    """No valid credential or client certificate for the endpoint (HTTP 401/403)."""


class NotReadyError(ProtocolStateError):
    """What was asked for does not exist yet (the phase has not closed; HTTP 425)."""


class UnavailableError(ProtocolStateError):
    """The service holds as many connections as it takes; retry later (HTTP 503)."""


class SlowRequestError(InvalidInputError):
    """A request whose line and headers did not arrive in time (HTTP 408)."""


class RefusalBudgetError(RateLimitedError):
    """A credential refused more often than a round allows: answered without any work (HTTP 429)."""


def encode_batch(items: Sequence[bytes]) -> bytes:
    """Frame a list of byte strings (order kept)."""
    parts = [struct.pack(">I", len(items))]
    for item in items:
        parts.append(struct.pack(">I", len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def decode_batch(data: bytes, *, limit: int = MAX_ITEMS) -> list[bytes]:
    """Parse :func:`encode_batch`'s framing; DecodeError on truncation, trailing bytes or a
    count above ``limit``."""
    view = memoryview(data)
    if len(view) < 4:
        raise DecodeError(f"batch must start with a 4-byte count, got {len(view)} bytes")
    (count,) = struct.unpack_from(">I", view, 0)
    if count > limit:
        raise DecodeError(f"batch count must be at most {limit}, got {count}")
    pos, out = 4, []
    for k in range(count):
        if pos + 4 > len(view):
            raise DecodeError(f"batch truncated at item {k}: no length")
        (n,) = struct.unpack_from(">I", view, pos)
        pos += 4
        if pos + n > len(view):
            raise DecodeError(f"batch truncated at item {k}: needs {n} bytes, {len(view) - pos} left")
        out.append(bytes(view[pos : pos + n]))
        pos += n
    if pos != len(view):
        raise DecodeError(f"batch has {len(view) - pos} trailing bytes")
    return out


def http_status(error: BaseException) -> int:
    """The HTTP status of a typed error (most specific class first); a peer's error, relayed,
    is a bad gateway."""
    if type(error).__name__ == "PeerError":
        return 502
    for cls, status in (
        (TooLargeError, 413),
        (SlowRequestError, 408),
        (RateLimitedError, 429),
        (NotReadyError, 425),
        (UnavailableError, 503),
        (UnauthorizedError, 403),
        (DecodeError, 400),
        (InvalidInputError, 400),
        (InvalidParameterError, 400),
        (VerificationError, 403),
        (ProtocolStateError, 409),
    ):
        if isinstance(error, cls):
            return status
    return 500


def error_body(error: BaseException) -> dict[str, str]:
    """The JSON body of an error response: its type and message (messages hold no secret)."""
    return {"error": type(error).__name__, "detail": str(error)}


__all__ = [
    "MAX_BATCH_BODY",
    "MAX_USER_BODY",
    "OCTETS",
    "REQUEST_ID",
    "ROUND_ID",
    "NotReadyError",
    "RateLimitedError",
    "RefusalBudgetError",
    "SlowRequestError",
    "TooLargeError",
    "UnauthorizedError",
    "UnavailableError",
    "decode_batch",
    "encode_batch",
    "error_body",
    "http_status",
]
