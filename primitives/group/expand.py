"""``expand_message_xmd`` of RFC 9380 §5.3.1, the byte expander under hash-to-group and hash-to-scalar.

RFC 9497 §4.1 instantiates both HashToGroup and HashToScalar for ristretto255-SHA512 with
``expand_message_xmd`` over SHA-512 producing 64 bytes. The expander lives with the groups (not
with the OPRF) because a group's ``hash_to_group`` needs it and the OPRF package imports the groups.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from primitives.errors import InvalidInputError

_OVERSIZE_PREFIX = b"H2C-OVERSIZE-DST-"


@lru_cache(maxsize=8)
def _padded_state(hash_name: str) -> tuple[hashlib._Hash, int, int]:
    """A hash state that has already absorbed Z_pad (one block of zeros), with its sizes.

    Every call of the expander starts with the same block, so copying a state that absorbed it
    saves one compression per call (the server hashes once per element).
    """
    state = hashlib.new(hash_name)
    block = state.block_size
    state.update(bytes(block))
    return state, state.digest_size, block


def expand_message_xmd(
    msg: bytes, dst: bytes, len_in_bytes: int, *, hash_name: str = "sha512"
) -> bytes:
    """``uniform_bytes = expand_message_xmd(msg, DST, len_in_bytes)`` (RFC 9380 §5.3.1).

    A DST longer than 255 bytes is first hashed as RFC 9380 §5.3.3 prescribes.
    """
    padded, b_in_bytes, _ = _padded_state(hash_name)
    if len(dst) > 255:
        dst = hashlib.new(hash_name, _OVERSIZE_PREFIX + dst).digest()
    ell = -(-len_in_bytes // b_in_bytes)
    if ell > 255 or len_in_bytes > 65535 or len_in_bytes < 1:
        raise InvalidInputError(
            f"len_in_bytes must be in [1, {min(65535, 255 * b_in_bytes)}], got {len_in_bytes}"
        )
    dst_prime = dst + len(dst).to_bytes(1, "big")
    state = padded.copy()
    state.update(msg)
    state.update(len_in_bytes.to_bytes(2, "big") + b"\x00" + dst_prime)
    b_0 = state.digest()
    b_i = hashlib.new(hash_name, b_0 + b"\x01" + dst_prime).digest()
    blocks = [b_i]
    for i in range(2, ell + 1):
        mixed = bytes(x ^ y for x, y in zip(b_0, b_i, strict=True))
        b_i = hashlib.new(hash_name, mixed + i.to_bytes(1, "big") + dst_prime).digest()
        blocks.append(b_i)
    return b"".join(blocks)[:len_in_bytes]
