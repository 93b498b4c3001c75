"""Prime-order groups behind one interface (RFC 9497 §2.1), and the ristretto255 constants.

Two backends implement :class:`PrimeOrderGroup` for ristretto255 (RFC 9496):

* ``ristretto255-sodium`` — :class:`~primitives.group.ristretto255_sodium.SodiumRistretto255`,
  a thin ctypes binding to the system libsodium (≥ 1.0.18). Elements and scalars are their
  32-byte encodings; every call releases the GIL, so threads use several cores.
* ``ristretto255-pure`` — :class:`~primitives.group.ristretto255_pure.PureRistretto255`,
  written from RFC 9496 in Python integers. Slow and not constant time: it exists to cross-check
  the other backend.

Both reject, in our own code, everything RFC 9497 §4.1 says a deserializer must reject: wrong
lengths, non-canonical element encodings, the identity element and scalars ≥ the group order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from primitives.randomness import RandomSource

E = TypeVar("E")
S = TypeVar("S")

#: ``Order()`` of ristretto255 (RFC 9496 §4.1): 2^252 + 27742317777372353535851937790883648493.
RISTRETTO255_ORDER = (1 << 252) + 27742317777372353535851937790883648493
#: Field prime of curve25519, p = 2^255 - 19.
CURVE25519_PRIME = (1 << 255) - 19
#: ``Ne`` and ``Ns`` of ristretto255 (RFC 9497 §4.1).
ELEMENT_SIZE = 32
SCALAR_SIZE = 32
#: Input length of the ristretto255 one-way map (RFC 9496 §4.3.4).
UNIFORM_BYTES = 64
#: Encoding of the ristretto255 generator (RFC 9496 §4.4; Appendix A.1, 1·B).
GENERATOR_ENCODING = bytes.fromhex("e2f2ae0a6abc4e71a884a961c500515f58e30b6aa582dd8db6a65945e08d2d76")


class PrimeOrderGroup(Protocol[E, S]):
    """What the OPRF needs from a group (RFC 9497 §2.1), over backend-specific ``E`` and ``S``:
    the ``group`` family's contract.

    Factory convention: the registry entry is called with no arguments (``factory()``). Listed
    are the operations the suite, its DLEQ proofs and the roles call; an implementation's other
    operations (``generator``, ``sub``, ``equal``, ``scalar_neg``, …) are its own.

    ``E`` (element) and ``S`` (scalar) are opaque to callers; only ``serialize_*`` output crosses
    a wire. Scalars handed to ``scalar_*`` and the element operations are reduced mod ``order``.
    """

    @property
    def name(self) -> str: ...
    @property
    def element_size(self) -> int: ...
    @property
    def scalar_size(self) -> int: ...
    @property
    def releases_gil(self) -> bool:
        """True when the heavy operations run without the GIL (threads then use several cores)."""
        ...

    # -- elements ---------------------------------------------------------------------------
    def identity(self) -> E: ...
    def hash_to_group(self, msg: bytes, dst: bytes) -> E:
        """hash_to_ristretto255: expand_message_xmd(SHA-512, 64 bytes) then the one-way map."""
        ...

    def add(self, a: E, b: E) -> E: ...
    def scalar_mult(self, s: S, a: E) -> E: ...
    def scalar_mult_base(self, s: S) -> E: ...
    def multi_scalar_mult(self, scalars: Sequence[S], elements: Sequence[E]) -> E:
        """``Σ scalars[i] * elements[i]``; VARIABLE time, for public scalars only."""
        ...

    def is_identity(self, a: E) -> bool: ...
    def serialize_element(self, a: E) -> bytes: ...
    def deserialize_element(self, data: bytes) -> E:
        """Decode; raises DecodeError on a wrong length, a non-canonical encoding or the identity."""
        ...

    # -- scalars ----------------------------------------------------------------------------
    def hash_to_scalar(self, msg: bytes, dst: bytes) -> S:
        """expand_message_xmd(SHA-512, 64 bytes), read little-endian, reduced mod the order."""
        ...

    def random_scalar(self, rng: RandomSource) -> S:
        """A uniformly random non-zero scalar drawn from ``rng``."""
        ...

    def scalar_add(self, a: S, b: S) -> S: ...
    def scalar_sub(self, a: S, b: S) -> S: ...
    def scalar_mul(self, a: S, b: S) -> S: ...
    def scalar_inverse(self, a: S) -> S:
        """The inverse mod the order; raises InvalidInputError for zero."""
        ...

    def scalar_is_zero(self, a: S) -> bool: ...
    def serialize_scalar(self, s: S) -> bytes: ...
    def deserialize_scalar(self, data: bytes) -> S:
        """Little-endian decode; raises DecodeError on a wrong length or a value ≥ the order."""
        ...


def get_group(name: str = "ristretto255-sodium") -> PrimeOrderGroup[Any, Any]:
    """The group registered under ``name`` in the ``group`` family of :mod:`primitives.registry`."""
    from primitives import registry

    group: PrimeOrderGroup[Any, Any] = registry.create("group", name)
    return group


__all__ = [
    "CURVE25519_PRIME",
    "ELEMENT_SIZE",
    "RISTRETTO255_ORDER",
    "SCALAR_SIZE",
    "UNIFORM_BYTES",
    "PrimeOrderGroup",
    "get_group",
]
