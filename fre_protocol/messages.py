"""The protocol's messages: typed, validated, with one canonical binary encoding (design §6).

Every message is a frozen dataclass validated in ``__post_init__``. On the wire a message is

    type (1 byte) || fields

where fixed-size fields (group elements, tags, contribution ids, proofs) are written raw,
integers big-endian unsigned, and variable-size fields carry a 4-byte big-endian length prefix.
There is exactly one encoding per message: :func:`decode` rejects unknown types, truncation,
trailing bytes, wrong fixed lengths and non-canonical orderings with :class:`DecodeError`, and
``decode(m.encode()) == m`` for every valid message. The sizes in the cost table are the lengths
of these encodings (plus the channel's sealing overhead where a payload is sealed).

Group elements and shares are carried as opaque bytes here; the receiving party checks that they
are canonical elements / in-range ring elements (the VOPRF suite and the secret-sharing scheme
own those checks), so a message can be well-formed and still be rejected by its receiver.
"""

from __future__ import annotations

import hashlib
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, TypeVar

from primitives.errors import DecodeError, InvalidInputError
from primitives.voprf.dleq import MAX_BATCH as MAX_PROOF_BATCH

ELEMENT_BYTES = 32  # ristretto255 element (RFC 9496 §4.3)
PROOF_BYTES = 64  # DLEQ proof: two scalars (RFC 9497 §2.2)
# A tag h_i is the first 32 bytes of the user's VOPRF output (64 bytes of SHA-512, RFC 9497
# §4.1). A truncated PRF is a PRF; 256 bits keep tags collision-free among any realistic number of
# buckets (pairs among 10^10 tags collide with probability < 2^-189), and every tagged message and
# the broadcast of released tags carry half the bytes.
TAG_BYTES = 32
CONTRIBUTION_ID_BYTES = 16  # random per-contribution nonce chosen by the user
# A contribution token t: 32 random bytes a user draws per submitted slot in phase 1 (design
# §6.8). Its hash goes into the sealed tag submission, t itself into both phase-2 shares.
TOKEN_BYTES = 32
TOKEN_HASH_BYTES = 32
_TOKEN_DOMAIN = b"fre-e2t/contribution-token/v1\x00"
MAX_BATCH = 1 << 20  # sanity bound on list lengths read from the wire
# MAX_PROOF_BATCH (2^16 - 1): the most elements one DLEQ proof covers (RFC 9497 §2.2.1 writes
# each composite index with I2OSP(i, 2)); a BatchEvaluation carries one proof's batch.
MAX_REASON = 64


def tag_of(prf_output: bytes) -> bytes:
    """The tag h_i of a VOPRF output: its first :data:`TAG_BYTES` bytes."""
    if len(prf_output) < TAG_BYTES:
        raise InvalidInputError(f"prf_output must be at least {TAG_BYTES} bytes, got {len(prf_output)}")
    return bytes(prf_output[:TAG_BYTES])


def token_hash(token: bytes) -> bytes:
    """H(t): SHA-256 of the token under this protocol's own domain label (design §6.8)."""
    if not isinstance(token, bytes) or len(token) != TOKEN_BYTES:
        got = len(token) if isinstance(token, bytes) else type(token).__name__
        raise InvalidInputError(f"token must be {TOKEN_BYTES} bytes, got {got}")
    return hashlib.sha256(_TOKEN_DOMAIN + token).digest()


class MessageType(IntEnum):
    """The type byte that starts every encoded message."""

    BLIND_REQUEST = 0x01
    EVALUATION = 0x02
    BATCH_EVALUATION = 0x03
    TAG_SUBMISSION = 0x04
    RELEASED_TAGS = 0x05
    SHARE_SUBMISSION = 0x06
    ACCEPTED_CONTRIBUTIONS = 0x07
    AGGREGATE_SHARE = 0x08
    SEALED_ENVELOPE = 0x09
    REJECTION = 0x0A
    COVER_SHARE = 0x0B
    RELEASED_TOKENS = 0x0C
    COMPACT_BROADCAST = 0x0D


class Role(IntEnum):
    """Protocol roles; their ``label`` is what transcripts record as sender/receiver/view."""

    USER = 1
    S_TAG = 2
    S_SYN = 3
    PROXY = 4
    DUMMY_USER = 5
    PUBLIC = 6

    @property
    def label(self) -> str:
        return _ROLE_LABELS[self]

    @classmethod
    def from_label(cls, label: str) -> Role:
        for role, name in _ROLE_LABELS.items():
            if name == label:
                return role
        raise InvalidInputError(f"role must be one of {sorted(_ROLE_LABELS.values())}, got {label!r}")


_ROLE_LABELS = {
    Role.USER: "user",
    Role.S_TAG: "S_tag",
    Role.S_SYN: "S_syn",
    Role.PROXY: "proxy",
    Role.DUMMY_USER: "dummy_user",
    Role.PUBLIC: "public",
}


# -- field checks ---------------------------------------------------------------------------------
def _check_bytes(name: str, value: object, length: int | None = None) -> None:
    if not isinstance(value, bytes):
        raise InvalidInputError(f"{name} must be bytes, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise InvalidInputError(f"{name} must be {length} bytes, got {len(value)}")


def _check_uint(name: str, value: object, bits: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < (1 << bits):
        raise InvalidInputError(f"{name} must be an integer in [0, 2^{bits}), got {value!r}")


def _check_sorted_unique(name: str, items: Sequence[bytes], length: int) -> None:
    if not isinstance(items, tuple):
        raise InvalidInputError(f"{name} must be a tuple, got {type(items).__name__}")
    if len(items) > MAX_BATCH:
        raise InvalidInputError(f"{name} must hold at most {MAX_BATCH} items, got {len(items)}")
    for i, item in enumerate(items):
        _check_bytes(f"{name}[{i}]", item, length)
    for i in range(1, len(items)):
        if not items[i - 1] < items[i]:
            raise InvalidInputError(f"{name} must be strictly increasing (canonical order); item {i} is not")


# -- low-level codec ------------------------------------------------------------------------------
class _Reader:
    """Reads fields from a frame; every shortfall is a :class:`DecodeError`."""

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, n: int, what: str) -> bytes:
        end = self._pos + n
        if end > len(self._data):
            raise DecodeError(
                f"message truncated: {what} needs {n} bytes, only {len(self._data) - self._pos} left"
            )
        out = self._data[self._pos : end]
        self._pos = end
        return out

    def u8(self, what: str) -> int:
        return self.take(1, what)[0]

    def u32(self, what: str) -> int:
        return int(struct.unpack(">I", self.take(4, what))[0])

    def var(self, what: str, limit: int = 1 << 30) -> bytes:
        n = self.u32(f"{what} length")
        if n > limit:
            raise DecodeError(f"{what} length must be at most {limit}, got {n}")
        return self.take(n, what)

    def count(self, what: str, limit: int = MAX_BATCH) -> int:
        n = self.u32(f"{what} count")
        if n > limit:
            raise DecodeError(f"{what} count must be at most {limit}, got {n}")
        return n

    def finish(self) -> None:
        if self._pos != len(self._data):
            raise DecodeError(f"message has {len(self._data) - self._pos} trailing bytes")


def _u32(value: int) -> bytes:
    return struct.pack(">I", value)


def _var(value: bytes) -> bytes:
    return _u32(len(value)) + value


# -- messages -------------------------------------------------------------------------------------
class Message(ABC):
    """Base class: ``encode`` writes the type byte and the fields; ``decode`` dispatches on it."""

    __slots__ = ()
    TYPE: ClassVar[MessageType]

    def encode(self) -> bytes:
        return bytes((self.TYPE,)) + self._body()

    @abstractmethod
    def _body(self) -> bytes:
        """The fields after the type byte, canonically encoded."""

    @classmethod
    @abstractmethod
    def _read(cls, reader: _Reader) -> Message:
        """Parse the fields after the type byte (strict: DecodeError on anything malformed)."""

    @property
    def size(self) -> int:
        """Encoded size in bytes (what the cost table reports)."""
        return len(self.encode())

    @property
    def type_name(self) -> str:
        return self.TYPE.name.lower()


@dataclass(frozen=True, slots=True, kw_only=True)
class BlindRequest(Message):
    """User → S_tag (sealed, via the proxy): one blinded element (RFC 9497 §3.3.2 Blind)."""

    TYPE: ClassVar[MessageType] = MessageType.BLIND_REQUEST
    blinded_element: bytes

    def __post_init__(self) -> None:
        _check_bytes("blinded_element", self.blinded_element, ELEMENT_BYTES)

    def _body(self) -> bytes:
        return self.blinded_element

    @classmethod
    def _read(cls, reader: _Reader) -> BlindRequest:
        return cls(blinded_element=reader.take(ELEMENT_BYTES, "blinded_element"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluation(Message):
    """S_tag → user (via the proxy): its evaluated element with a per-user DLEQ proof."""

    TYPE: ClassVar[MessageType] = MessageType.EVALUATION
    evaluated_element: bytes
    proof: bytes

    def __post_init__(self) -> None:
        _check_bytes("evaluated_element", self.evaluated_element, ELEMENT_BYTES)
        _check_bytes("proof", self.proof, PROOF_BYTES)

    def _body(self) -> bytes:
        return self.evaluated_element + self.proof

    @classmethod
    def _read(cls, reader: _Reader) -> Evaluation:
        return cls(
            evaluated_element=reader.take(ELEMENT_BYTES, "evaluated_element"),
            proof=reader.take(PROOF_BYTES, "proof"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchEvaluation(Message):
    """S_tag → user: a whole proof batch (blinded and evaluated elements, one DLEQ proof) and the
    user's position in it. The user needs every element to verify the batched proof
    (RFC 9497 §2.2.1 ComputeComposites)."""

    TYPE: ClassVar[MessageType] = MessageType.BATCH_EVALUATION
    position: int
    blinded_elements: tuple[bytes, ...]
    evaluated_elements: tuple[bytes, ...]
    proof: bytes

    def __post_init__(self) -> None:
        for name in ("blinded_elements", "evaluated_elements"):
            items = getattr(self, name)
            if not isinstance(items, tuple) or not 1 <= len(items) <= MAX_PROOF_BATCH:
                got = len(items) if isinstance(items, tuple) else type(items).__name__
                raise InvalidInputError(f"{name} must be a tuple of 1..{MAX_PROOF_BATCH} elements, got {got}")
            for i, item in enumerate(items):
                _check_bytes(f"{name}[{i}]", item, ELEMENT_BYTES)
        if len(self.blinded_elements) != len(self.evaluated_elements):
            raise InvalidInputError(
                f"evaluated_elements must match blinded_elements in length, got "
                f"{len(self.evaluated_elements)} and {len(self.blinded_elements)}"
            )
        _check_uint("position", self.position, 32)
        if self.position >= len(self.blinded_elements):
            raise InvalidInputError(
                f"position must be < batch size {len(self.blinded_elements)}, got {self.position}"
            )
        _check_bytes("proof", self.proof, PROOF_BYTES)

    def _body(self) -> bytes:
        return (
            _u32(self.position)
            + _u32(len(self.blinded_elements))
            + b"".join(self.blinded_elements)
            + b"".join(self.evaluated_elements)
            + self.proof
        )

    @classmethod
    def _read(cls, reader: _Reader) -> BatchEvaluation:
        position = reader.u32("position")
        n = reader.count("batch", MAX_PROOF_BATCH)
        blinded = reader.take(n * ELEMENT_BYTES, "blinded_elements")
        evaluated = reader.take(n * ELEMENT_BYTES, "evaluated_elements")
        split = range(0, n * ELEMENT_BYTES, ELEMENT_BYTES)
        return cls(
            position=position,
            blinded_elements=tuple(blinded[i : i + ELEMENT_BYTES] for i in split),
            evaluated_elements=tuple(evaluated[i : i + ELEMENT_BYTES] for i in split),
            proof=reader.take(PROOF_BYTES, "proof"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TagSubmission(Message):
    """User (or S_tag's dummy user) → S_syn, sealed: one tag and the hash H(t) of the
    contribution token the user will show in phase 2 (design §6.8).

    H(t) is fresh per submission, so it also lets S_syn drop a message the network delivered
    twice (it took the place of the random nonce a submission carried before tokens). The dummy
    user's submissions carry random token hashes, so real and dummy submissions have one size and
    format.
    """

    TYPE: ClassVar[MessageType] = MessageType.TAG_SUBMISSION
    tag: bytes
    token_hash: bytes

    def __post_init__(self) -> None:
        _check_bytes("tag", self.tag, TAG_BYTES)
        _check_bytes("token_hash", self.token_hash, TOKEN_HASH_BYTES)

    def _body(self) -> bytes:
        return self.tag + self.token_hash

    @classmethod
    def _read(cls, reader: _Reader) -> TagSubmission:
        return cls(tag=reader.take(TAG_BYTES, "tag"), token_hash=reader.take(TOKEN_HASH_BYTES, "token_hash"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleasedTags(Message):
    """S_syn → everyone (broadcast): the tags with sampled count ≥ τ and their counts, sorted."""

    TYPE: ClassVar[MessageType] = MessageType.RELEASED_TAGS
    tags: tuple[bytes, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_sorted_unique("tags", self.tags, TAG_BYTES)
        if not isinstance(self.counts, tuple) or len(self.counts) != len(self.tags):
            raise InvalidInputError(
                f"counts must be a tuple with one count per tag ({len(self.tags)}), got {self.counts!r:.80}"
            )
        for i, c in enumerate(self.counts):
            _check_uint(f"counts[{i}]", c, 32)
            if c < 1:
                raise InvalidInputError(f"counts[{i}] must be >= 1, got {c}")

    def _body(self) -> bytes:
        return _u32(len(self.tags)) + b"".join(t + _u32(c) for t, c in zip(self.tags, self.counts, strict=True))

    @classmethod
    def _read(cls, reader: _Reader) -> ReleasedTags:
        n = reader.count("released tags")
        tags, counts = [], []
        for _ in range(n):
            tags.append(reader.take(TAG_BYTES, "tag"))
            counts.append(reader.u32("count"))
        return cls(tags=tuple(tags), counts=tuple(counts))

    def as_dict(self) -> dict[bytes, int]:
        return dict(zip(self.tags, self.counts, strict=True))


#: The longest broadcast encoding name a CompactBroadcast carries (a registry name, ASCII).
MAX_ENCODING_NAME = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactBroadcast(Message):
    """S_syn → every user (relayed by the proxy): the released tags and their counts in a
    broadcast encoding (registry family ``broadcast``, :mod:`primitives.compact`), which a device
    queries for its own tag without the list. ``encoding`` names it (the round's public choice),
    ``max_count`` is the largest released count (0 when none: phase 2's ring is sized for it,
    design §6) and ``body`` the encoding's bytes (built from the released tags, their counts and
    the round's public broadcast seed). Wire: ``u8 len || name || u32 max_count || u32 len ||
    body``."""

    TYPE: ClassVar[MessageType] = MessageType.COMPACT_BROADCAST
    encoding: str
    max_count: int
    body: bytes

    def __post_init__(self) -> None:
        name = self.encoding
        if (
            not isinstance(name, str) or not 1 <= len(name) <= MAX_ENCODING_NAME or not name.isascii()
            or not name.isprintable()
        ):
            raise InvalidInputError(
                f"encoding must be 1 to {MAX_ENCODING_NAME} printable ASCII characters, got {name!r:.80}"
            )
        _check_uint("max_count", self.max_count, 32)
        _check_bytes("body", self.body)

    def _body(self) -> bytes:
        name = self.encoding.encode("ascii")
        return bytes((len(name),)) + name + _u32(self.max_count) + _var(self.body)

    @classmethod
    def _read(cls, reader: _Reader) -> CompactBroadcast:
        raw = reader.take(reader.u8("encoding length"), "encoding")
        try:
            name = raw.decode("ascii")
        except UnicodeDecodeError:
            raise DecodeError("encoding must be ASCII") from None
        return cls(encoding=name, max_count=reader.u32("max_count"), body=reader.var("body"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSubmission(Message):
    """User → S_tag or S_syn, sealed: one additive share of the user's DDG-encoded embedding,
    tagged with h_i, a contribution id common to the user's two shares (so both servers can
    sum over exactly the same set of users) and the contribution token t whose hash the user's
    phase-1 submission of h_i carried (design §6.8: a server counts a share only with an unused
    token of an accepted submission of its tag)."""

    TYPE: ClassVar[MessageType] = MessageType.SHARE_SUBMISSION
    tag: bytes
    contribution_id: bytes
    token: bytes
    share: bytes

    def __post_init__(self) -> None:
        _check_bytes("tag", self.tag, TAG_BYTES)
        _check_bytes("contribution_id", self.contribution_id, CONTRIBUTION_ID_BYTES)
        _check_bytes("token", self.token, TOKEN_BYTES)
        _check_bytes("share", self.share)
        if not self.share:
            raise InvalidInputError("share must be non-empty")

    def _body(self) -> bytes:
        return self.tag + self.contribution_id + self.token + _var(self.share)

    @classmethod
    def _read(cls, reader: _Reader) -> ShareSubmission:
        return cls(
            tag=reader.take(TAG_BYTES, "tag"),
            contribution_id=reader.take(CONTRIBUTION_ID_BYTES, "contribution_id"),
            token=reader.take(TOKEN_BYTES, "token"),
            share=reader.var("share"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleasedTokens(Message):
    """S_syn → S_tag (server to server): for one released tag, the token hashes of the phase-1
    submissions S_syn counted for it, sorted. S_tag accepts a share of that tag only with a
    token hashing into this set, once (design §6.8). It reveals n_h random values, and n_h is
    the released count; it is never published."""

    TYPE: ClassVar[MessageType] = MessageType.RELEASED_TOKENS
    tag: bytes
    token_hashes: tuple[bytes, ...]

    def __post_init__(self) -> None:
        _check_bytes("tag", self.tag, TAG_BYTES)
        _check_sorted_unique("token_hashes", self.token_hashes, TOKEN_HASH_BYTES)

    def _body(self) -> bytes:
        return self.tag + _u32(len(self.token_hashes)) + b"".join(self.token_hashes)

    @classmethod
    def _read(cls, reader: _Reader) -> ReleasedTokens:
        tag = reader.take(TAG_BYTES, "tag")
        n = reader.count("token hashes")
        raw = reader.take(n * TOKEN_HASH_BYTES, "token_hashes")
        hashes = tuple(raw[i : i + TOKEN_HASH_BYTES] for i in range(0, len(raw), TOKEN_HASH_BYTES))
        return cls(tag=tag, token_hashes=hashes)


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptedContributions(Message):
    """S_syn → S_tag: for one released tag, the contribution ids whose share S_syn accepted."""

    TYPE: ClassVar[MessageType] = MessageType.ACCEPTED_CONTRIBUTIONS
    tag: bytes
    contribution_ids: tuple[bytes, ...]

    def __post_init__(self) -> None:
        _check_bytes("tag", self.tag, TAG_BYTES)
        _check_sorted_unique("contribution_ids", self.contribution_ids, CONTRIBUTION_ID_BYTES)

    def _body(self) -> bytes:
        return self.tag + _u32(len(self.contribution_ids)) + b"".join(self.contribution_ids)

    @classmethod
    def _read(cls, reader: _Reader) -> AcceptedContributions:
        tag = reader.take(TAG_BYTES, "tag")
        n = reader.count("contribution ids")
        raw = reader.take(n * CONTRIBUTION_ID_BYTES, "contribution_ids")
        ids = tuple(raw[i : i + CONTRIBUTION_ID_BYTES] for i in range(0, len(raw), CONTRIBUTION_ID_BYTES))
        return cls(tag=tag, contribution_ids=ids)


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregateShare(Message):
    """S_tag → S_syn: S_tag's sum (mod M) of its shares for one tag, over exactly the listed
    contribution ids (those both servers accepted). ``values`` are the d' ring elements as
    unsigned 64-bit big-endian integers; S_syn checks they are < M."""

    TYPE: ClassVar[MessageType] = MessageType.AGGREGATE_SHARE
    tag: bytes
    contribution_ids: tuple[bytes, ...]
    values: bytes

    def __post_init__(self) -> None:
        _check_bytes("tag", self.tag, TAG_BYTES)
        _check_sorted_unique("contribution_ids", self.contribution_ids, CONTRIBUTION_ID_BYTES)
        _check_bytes("values", self.values)
        if not self.values or len(self.values) % 8:
            raise InvalidInputError(
                f"values must be a non-empty multiple of 8 bytes, got {len(self.values)}"
            )

    @property
    def count(self) -> int:
        return len(self.contribution_ids)

    def _body(self) -> bytes:
        return (
            self.tag
            + _u32(len(self.contribution_ids))
            + b"".join(self.contribution_ids)
            + _var(self.values)
        )

    @classmethod
    def _read(cls, reader: _Reader) -> AggregateShare:
        tag = reader.take(TAG_BYTES, "tag")
        n = reader.count("contribution ids")
        raw = reader.take(n * CONTRIBUTION_ID_BYTES, "contribution_ids")
        ids = tuple(raw[i : i + CONTRIBUTION_ID_BYTES] for i in range(0, len(raw), CONTRIBUTION_ID_BYTES))
        return cls(tag=tag, contribution_ids=ids, values=reader.var("values"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SealedEnvelope(Message):
    """What the proxy sees of a user → server message: the recipient and a ciphertext sealed to
    that recipient's public key (the plaintext is an encoded message)."""

    TYPE: ClassVar[MessageType] = MessageType.SEALED_ENVELOPE
    recipient: Role
    ciphertext: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.recipient, Role) or self.recipient not in (Role.S_TAG, Role.S_SYN):
            raise InvalidInputError(f"recipient must be S_tag or S_syn, got {self.recipient!r}")
        _check_bytes("ciphertext", self.ciphertext)
        if not self.ciphertext:
            raise InvalidInputError("ciphertext must be non-empty")

    def _body(self) -> bytes:
        return bytes((self.recipient,)) + _var(self.ciphertext)

    @staticmethod
    def ciphertext_of(data: bytes) -> bytes:
        """The ciphertext of an encoded envelope, read from its framing alone: the proxy forwards
        thousands per batch, each already decoded in full when it was admitted."""
        if len(data) < 6 or data[0] != MessageType.SEALED_ENVELOPE:
            raise DecodeError("not an encoded sealed envelope")
        if int.from_bytes(data[2:6], "big") != len(data) - 6:
            raise DecodeError(f"sealed envelope's ciphertext length must be {len(data) - 6}, got {int.from_bytes(data[2:6], 'big')}")
        return bytes(data[6:])

    @classmethod
    def _read(cls, reader: _Reader) -> SealedEnvelope:
        code = reader.u8("recipient")
        try:
            recipient = Role(code)
        except ValueError:
            raise DecodeError(f"recipient must be a role code, got {code}") from None
        return cls(recipient=recipient, ciphertext=reader.var("ciphertext"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejection(Message):
    """Server → user (via the proxy): the request at this position was rejected; ``reason`` is
    the error type name (never the error text, which could echo input)."""

    TYPE: ClassVar[MessageType] = MessageType.REJECTION
    reason: str

    def __post_init__(self) -> None:
        if (
            not isinstance(self.reason, str)
            or not 1 <= len(self.reason) <= MAX_REASON
            or not self.reason.isascii()
            or not self.reason.isidentifier()
        ):
            raise InvalidInputError(f"reason must be an error type name, got {self.reason!r:.80}")

    def _body(self) -> bytes:
        raw = self.reason.encode("ascii")
        return bytes((len(raw),)) + raw

    @classmethod
    def _read(cls, reader: _Reader) -> Rejection:
        n = reader.u8("reason length")
        raw = reader.take(n, "reason")
        try:
            reason = raw.decode("ascii")
        except UnicodeDecodeError:
            raise DecodeError("reason must be ASCII") from None
        return cls(reason=reason)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoverShare(Message):
    """User → S_tag or S_syn, sealed: phase-2 cover traffic from a user with no contribution
    (its tag was not released, or it did not submit one). It carries a random token field where
    a share carries its token, and encodes to exactly the length of a :class:`ShareSubmission`
    whose share is ``len(padding) − TAG_BYTES − CONTRIBUTION_ID_BYTES`` bytes, so sealed it
    looks the same to the proxy; the server opens it and discards it."""

    TYPE: ClassVar[MessageType] = MessageType.COVER_SHARE
    token: bytes
    padding: bytes

    def __post_init__(self) -> None:
        _check_bytes("token", self.token, TOKEN_BYTES)
        _check_bytes("padding", self.padding)
        if len(self.padding) <= TAG_BYTES + CONTRIBUTION_ID_BYTES:
            raise InvalidInputError(
                f"padding must be longer than {TAG_BYTES + CONTRIBUTION_ID_BYTES} bytes, got {len(self.padding)}"
            )

    @classmethod
    def matching(cls, share_bytes: int, *, token: bytes = bytes(TOKEN_BYTES)) -> CoverShare:
        """The cover message as long as a ShareSubmission carrying a ``share_bytes`` share (users
        pass a fresh random ``token``; the default zeros serve size computations)."""
        return cls(token=token, padding=bytes(TAG_BYTES + CONTRIBUTION_ID_BYTES + share_bytes))

    def _body(self) -> bytes:
        return self.token + _var(self.padding)

    @classmethod
    def _read(cls, reader: _Reader) -> CoverShare:
        return cls(token=reader.take(TOKEN_BYTES, "token"), padding=reader.var("padding"))


MESSAGE_CLASSES: dict[MessageType, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        BlindRequest,
        Evaluation,
        BatchEvaluation,
        TagSubmission,
        ReleasedTags,
        ShareSubmission,
        AcceptedContributions,
        AggregateShare,
        SealedEnvelope,
        Rejection,
        CoverShare,
        ReleasedTokens,
        CompactBroadcast,
    )
}


def decode(data: bytes, expected: type[Message] | tuple[type[Message], ...] | None = None) -> Message:
    """Parse one encoded message; :class:`DecodeError` on anything malformed or non-canonical.

    ``expected`` restricts the accepted classes (a message of another type is a DecodeError).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"message must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise DecodeError("message is empty")
    try:
        mtype = MessageType(data[0])
    except ValueError:
        raise DecodeError(f"unknown message type byte 0x{data[0]:02x}") from None
    cls = MESSAGE_CLASSES[mtype]
    if expected is not None:
        allowed = expected if isinstance(expected, tuple) else (expected,)
        if cls not in allowed:
            names = ", ".join(c.__name__ for c in allowed)
            raise DecodeError(f"message type must be {names}, got {cls.__name__}")
    reader = _Reader(data)
    reader.take(1, "type")
    try:
        message = cls._read(reader)
    except DecodeError:
        raise
    except InvalidInputError as exc:  # field validation of a decoded value
        raise DecodeError(f"{cls.__name__}: {exc}") from None
    reader.finish()
    return message


M = TypeVar("M", bound=Message)


def decode_as(data: bytes, cls: type[M]) -> M:
    """:func:`decode` restricted to one message class, typed as that class."""
    message = decode(data, cls)
    assert isinstance(message, cls)
    return message


def message_type_name(data: bytes) -> str:
    """The snake_case type name of an encoded message (``"unknown"`` when the byte is not one)."""
    try:
        return MessageType(data[0]).name.lower()
    except (ValueError, IndexError):
        return "unknown"


__all__ = [
    "CONTRIBUTION_ID_BYTES",
    "ELEMENT_BYTES",
    "MAX_PROOF_BATCH",
    "MESSAGE_CLASSES",
    "CompactBroadcast",
    "CoverShare",
    "PROOF_BYTES",
    "TAG_BYTES",
    "TOKEN_BYTES",
    "TOKEN_HASH_BYTES",
    "tag_of",
    "token_hash",
    "ReleasedTokens",
    "AcceptedContributions",
    "AggregateShare",
    "BatchEvaluation",
    "BlindRequest",
    "Evaluation",
    "Message",
    "MessageType",
    "Rejection",
    "ReleasedTags",
    "Role",
    "SealedEnvelope",
    "ShareSubmission",
    "TagSubmission",
    "decode",
    "decode_as",
    "message_type_name",
]
