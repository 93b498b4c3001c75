"""An HPKE sealed channel (RFC 9180): the second implementation of the ``channel`` family.

Suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM (KEM 0x0020, KDF 0x0001, AEAD
0x0001), base mode, single shot — a fresh ephemeral key per message and the sender's first (and
only) ``Seal`` with empty associated data, the ciphertext sent as ``enc || ct``. This is how
Oblivious HTTP (RFC 9458) encapsulates a request; RFC 9458's example uses the same suite. ``info``
binds every box to this protocol (:data:`INFO`), so a box made for another HPKE application does
not open here.

Why a second channel: libsodium's sealed box (:mod:`primitives.channel`) is X25519 +
XSalsa20-Poly1305 with a BLAKE2b nonce — not a standard outside libsodium. HPKE is the IETF
standard a deployment behind OHTTP relays would be asked for, with published test vectors; the two
have the same size (48 bytes of overhead: a 32-byte ``enc`` and a 16-byte tag), so cover traffic
and message sizes are unchanged when one replaces the other.

Built from libsodium's X25519 (through pynacl, 2.5× faster than ``cryptography``'s here),
``cryptography``'s AES-GCM and HKDF written out (RFC 5869 with HMAC-SHA256) for the RFC's labeled
forms: ``cryptography`` ≥ 46 ships an HPKE ``Suite``, but its one-shot
``encrypt`` draws the ephemeral key itself, and the protocol needs the ephemeral key before the
payload exists (:meth:`HpkeChannel.prepare_seals`: a device's offline work, reproducible from a
seeded :class:`RandomSource` in test runs). The tests check the RFC 9180 A.1.1 vector value by value
and that ``cryptography``'s own HPKE opens these boxes (and the reverse), where it is installed.

Key pairs and ephemeral keys come from ``DeriveKeyPair`` of 32 bytes of the caller's source
(RFC 9180 §7.1.3), so ``ikm`` is the only randomness drawn: 32 bytes per seal, like the sealed box.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import ClassVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base
from nacl.exceptions import RuntimeError as NaclRuntimeError

from primitives.channel import KEY_SIZE, OneTimeKey, check_public_key
from primitives.errors import DecodeError, InvalidInputError
from primitives.randomness import RandomSource
from primitives.secret import Secret

#: Bytes a box adds to its plaintext: ``enc`` (Npk = 32) and the AES-GCM tag (Nt = 16).
HPKE_OVERHEAD = 48
#: HPKE ``info`` of every box of this channel (context binding, RFC 9180 §5.1).
INFO = b"fre-e2t channel v1"

_KEM_ID, _KDF_ID, _AEAD_ID = 0x0020, 0x0001, 0x0001
_KEM_SUITE = b"KEM" + _KEM_ID.to_bytes(2, "big")
_HPKE_SUITE = b"HPKE" + _KEM_ID.to_bytes(2, "big") + _KDF_ID.to_bytes(2, "big") + _AEAD_ID.to_bytes(2, "big")
_NK, _NN = 16, 12
_MODE_BASE = b"\x00"


def _extract(salt: bytes, ikm: bytes) -> bytes:
    return hmac.new(salt, ikm, hashlib.sha256).digest()


def _expand(prk: bytes, info: bytes, length: int) -> bytes:
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def labeled_extract(suite: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    """RFC 9180 §4 ``LabeledExtract``."""
    return _extract(salt, b"HPKE-v1" + suite + label + ikm)


def labeled_expand(suite: bytes, prk: bytes, label: bytes, info: bytes, length: int) -> bytes:
    """RFC 9180 §4 ``LabeledExpand``."""
    return _expand(prk, length.to_bytes(2, "big") + b"HPKE-v1" + suite + label + info, length)


def derive_key_pair(ikm: bytes) -> tuple[bytes, bytes]:
    """RFC 9180 §7.1.3 ``DeriveKeyPair`` for X25519: ``(skX, pkX)`` serialized."""
    prk = labeled_extract(_KEM_SUITE, b"", b"dkp_prk", ikm)
    sk = labeled_expand(_KEM_SUITE, prk, b"sk", b"", KEY_SIZE)
    return sk, bytes(crypto_scalarmult_base(sk))


def _dh(sk: bytes, pk: bytes) -> bytes:
    """X25519(sk, pk); libsodium refuses an all-zero result (a low-order point), as RFC 9180
    §7.1.4 requires."""
    try:
        return bytes(crypto_scalarmult(sk, pk))
    except NaclRuntimeError as exc:
        raise DecodeError("public key is not a usable X25519 public key") from exc


def shared_secret(dh: bytes, enc: bytes, pk_r: bytes) -> bytes:
    """DHKEM ``ExtractAndExpand`` (RFC 9180 §4.1) with ``kem_context = enc || pkRm``."""
    prk = labeled_extract(_KEM_SUITE, b"", b"eae_prk", dh)
    return labeled_expand(_KEM_SUITE, prk, b"shared_secret", enc + pk_r, KEY_SIZE)


def _context(info: bytes) -> bytes:
    psk_id_hash = labeled_extract(_HPKE_SUITE, b"", b"psk_id_hash", b"")
    info_hash = labeled_extract(_HPKE_SUITE, b"", b"info_hash", info)
    return _MODE_BASE + psk_id_hash + info_hash


_CONTEXT = _context(INFO)


def key_schedule(secret_in: bytes, context: bytes = _CONTEXT) -> tuple[bytes, bytes]:
    """Base-mode ``KeySchedule`` (RFC 9180 §5.1): ``(key, base_nonce)`` (no exporter needed)."""
    secret = labeled_extract(_HPKE_SUITE, secret_in, b"secret", b"")
    return (
        labeled_expand(_HPKE_SUITE, secret, b"key", context, _NK),
        labeled_expand(_HPKE_SUITE, secret, b"base_nonce", context, _NN),
    )


class PreparedHpkeSeal:
    """The sender context of one box, made before its payload: ``enc``, key (a
    :class:`~primitives.channel.OneTimeKey`) and base nonce. Single use: a second payload under
    the same key and nonce would break AES-GCM, so a second :meth:`HpkeChannel.seal_prepared`
    raises ProtocolStateError."""

    __slots__ = ("recipient", "_enc", "_key", "_nonce")

    def __init__(self, recipient: bytes, enc: bytes, key: Secret[bytes], nonce: bytes) -> None:
        self.recipient = recipient
        self._enc, self._key, self._nonce = enc, OneTimeKey(key), nonce

    @property
    def used(self) -> bool:
        return self._key.used

    def take(self) -> tuple[bytes, bytes, bytes]:
        return self._enc, self._key.take(), self._nonce

    def __repr__(self) -> str:  # never shows key material
        return f"PreparedHpkeSeal(used={self.used})"


def _check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidInputError(f"count must be an integer >= 0, got {count!r}")
    return count


class HpkeChannel:
    """RFC 9180 base-mode HPKE, DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / AES-128-GCM, single shot."""

    __slots__ = ()
    name: ClassVar[str] = "hpke"
    overhead: ClassVar[int] = HPKE_OVERHEAD

    def generate_keypair(self, rng: RandomSource | None = None) -> tuple[Secret[bytes], bytes]:
        """``DeriveKeyPair`` of 32 bytes from ``rng``, or a fresh key from the OS CSPRNG."""
        ikm = (rng or RandomSource.cryptographic()).random_bytes(KEY_SIZE)
        sk, pk = derive_key_pair(ikm)
        return Secret(sk), pk

    def prepare_seals(self, public_key: bytes, count: int, rng: RandomSource) -> list[PreparedHpkeSeal]:
        """``count`` sender contexts to ``public_key`` (Encap + KeySchedule), ephemeral keys from
        ``DeriveKeyPair`` of ``rng``'s bytes (32 a seal, drawn at once)."""
        recipient = check_public_key(public_key)
        ikms = rng.random_bytes(KEY_SIZE * _check_count(count))
        out: list[PreparedHpkeSeal] = []
        for k in range(count):
            sk_e, enc = derive_key_pair(ikms[KEY_SIZE * k : KEY_SIZE * (k + 1)])
            key, nonce = key_schedule(shared_secret(_dh(sk_e, recipient), enc, recipient))
            out.append(PreparedHpkeSeal(recipient, enc, Secret(key), nonce))
        return out

    def skip_seals(self, count: int, rng: RandomSource) -> None:
        """Advance ``rng`` past :meth:`prepare_seals` of ``count`` seals."""
        rng.random_bytes(KEY_SIZE * _check_count(count))

    def seal_prepared(self, prepared: PreparedHpkeSeal, plaintext: bytes) -> bytes:
        """``enc || Seal(key, base_nonce, aad="", plaintext)``: ``len(plaintext) + 48`` bytes."""
        if not isinstance(prepared, PreparedHpkeSeal):
            raise InvalidInputError(f"prepared must be a PreparedHpkeSeal, got {type(prepared).__name__}")
        if not isinstance(plaintext, bytes | bytearray | memoryview):
            raise InvalidInputError(f"plaintext must be bytes, got {type(plaintext).__name__}")
        enc, key, nonce = prepared.take()
        return enc + AESGCM(key).encrypt(nonce, bytes(plaintext), b"")

    def seal(self, public_key: bytes, plaintext: bytes) -> bytes:
        """One box with a fresh ephemeral key from the OS CSPRNG (outside the contract)."""
        return self.seal_prepared(self.prepare_seals(public_key, 1, RandomSource.cryptographic())[0], plaintext)

    def try_open_many(self, private_key: Secret[bytes] | bytes, ciphertexts: list[bytes] | tuple[bytes, ...]) -> list[bytes | DecodeError]:
        """Open each box; a truncated, tampered or misaddressed one yields its DecodeError."""
        raw = private_key.reveal() if isinstance(private_key, Secret) else private_key
        if not isinstance(raw, bytes | bytearray) or len(raw) != KEY_SIZE:
            raise InvalidInputError(f"private_key must be {KEY_SIZE} bytes")
        sk = bytes(raw)
        pk_r = bytes(crypto_scalarmult_base(sk))
        out: list[bytes | DecodeError] = []
        for ciphertext in ciphertexts:
            try:
                out.append(self._open(sk, pk_r, ciphertext))
            except DecodeError as exc:
                out.append(exc)
        return out

    def open(self, private_key: Secret[bytes] | bytes, ciphertext: bytes) -> bytes:
        """One box (outside the contract); DecodeError if it does not open."""
        result = self.try_open_many(private_key, [ciphertext])[0]
        if isinstance(result, DecodeError):
            raise result
        return result

    @staticmethod
    def _open(sk: bytes, pk_r: bytes, ciphertext: bytes) -> bytes:
        if not isinstance(ciphertext, bytes | bytearray | memoryview):
            raise DecodeError(f"ciphertext must be bytes, got {type(ciphertext).__name__}")
        data = bytes(ciphertext)
        if len(data) < HPKE_OVERHEAD:
            raise DecodeError(f"ciphertext must be at least {HPKE_OVERHEAD} bytes, got {len(data)} bytes")
        enc = data[:KEY_SIZE]
        key, nonce = key_schedule(shared_secret(_dh(sk, enc), enc, pk_r))
        try:
            return AESGCM(key).decrypt(nonce, data[KEY_SIZE:], b"")
        except InvalidTag as exc:
            raise DecodeError(
                "ciphertext failed authentication: tampered, truncated or sealed to another key"
            ) from exc

    def __repr__(self) -> str:
        return "HpkeChannel()"


__all__ = ["HPKE_OVERHEAD", "INFO", "HpkeChannel", "PreparedHpkeSeal", "derive_key_pair", "key_schedule", "labeled_expand", "labeled_extract", "shared_secret"]
