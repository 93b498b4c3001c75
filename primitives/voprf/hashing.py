"""Byte framing and domain separation of RFC 9497 for the ristretto255-SHA512 suite.

``expand_message_xmd`` (RFC 9380 §5.3.1) is implemented in :mod:`primitives.group.expand`, next to
the groups that need it for hash-to-group; it is re-exported here for the OPRF's users.
"""

from __future__ import annotations

import hashlib

from primitives.errors import InvalidInputError
from primitives.group.expand import expand_message_xmd

#: The ciphersuite identifier of RFC 9497 §4.1.
SUITE_ID = "ristretto255-SHA512"
#: ``Nh``: SHA-512 output length, the length of every OPRF output.
HASH_SIZE = 64
#: PrivateInput and PublicInput are length-prefixed with two bytes (RFC 9497 §1.2).
MAX_INPUT_LENGTH = 0xFFFF


def i2osp(value: int, length: int) -> bytes:
    """I2OSP of RFC 8017 §4.1: big-endian, exactly ``length`` bytes."""
    return value.to_bytes(length, "big")


def framed(data: bytes) -> bytes:
    """``I2OSP(len(data), 2) || data``, the framing every transcript field uses."""
    return len(data).to_bytes(2, "big") + data


def context_string(mode: int, identifier: str = SUITE_ID) -> bytes:
    """``"OPRFV1-" || I2OSP(mode, 1) || "-" || identifier`` (RFC 9497 §3.1).

    The mode is one raw byte (0x00, 0x01, 0x02), not its ASCII digit.
    """
    return b"OPRFV1-" + i2osp(mode, 1) + b"-" + identifier.encode("ascii")


def hash_to_group_dst(context: bytes) -> bytes:
    return b"HashToGroup-" + context


def hash_to_scalar_dst(context: bytes) -> bytes:
    return b"HashToScalar-" + context


def derive_key_pair_dst(context: bytes) -> bytes:
    """``"DeriveKeyPair" || contextString`` (RFC 9497 §3.2.1) — no hyphen after the label."""
    return b"DeriveKeyPair" + context


def check_input(value: bytes, name: str) -> bytes:
    """A PrivateInput/PublicInput: bytes of at most 2^16 - 1 bytes (RFC 9497 §1.2)."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidInputError(f"{name} must be bytes, got {type(value).__name__}")
    value = bytes(value)
    if len(value) > MAX_INPUT_LENGTH:
        raise InvalidInputError(
            f"{name} must be at most {MAX_INPUT_LENGTH} bytes long, got {len(value)}"
        )
    return value


def finalize_hash(input_: bytes, unblinded: bytes, info: bytes | None) -> bytes:
    """The PRF output: Hash of the framed input, [framed info,] framed element and "Finalize"."""
    h = hashlib.sha512(framed(input_))
    if info is not None:
        h.update(framed(info))
    h.update(framed(unblinded))
    h.update(b"Finalize")
    return h.digest()


__all__ = [
    "HASH_SIZE",
    "MAX_INPUT_LENGTH",
    "SUITE_ID",
    "check_input",
    "context_string",
    "derive_key_pair_dst",
    "expand_message_xmd",
    "finalize_hash",
    "framed",
    "hash_to_group_dst",
    "hash_to_scalar_dst",
    "i2osp",
]
