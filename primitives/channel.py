"""The sealed user→server channel (design §5, §6): payloads the proxy forwards but cannot read.

A user seals each payload to the receiving server's X25519 public key with libsodium's sealed box
(``crypto_box_seal`` via pynacl): a fresh ephemeral key pair per message, X25519 + XSalsa20-
Poly1305, 48 bytes of overhead (32-byte ephemeral public key + 16-byte tag). Only the holder of
the private key can open it, and the box is anonymous: it does not say who sealed it, which is
what the shuffler needs.

Keys and ephemeral keys come from libsodium's ``randombytes`` (the OS CSPRNG). For reproducible
test runs :meth:`SealedBoxChannel.generate_keypair` also accepts a seeded
:class:`RandomSource`; ciphertexts of :meth:`SealedBoxChannel.seal` stay non-reproducible because
libsodium draws the ephemeral key itself. Registry family ``channel``: ``sealed-box`` →
:class:`SealedBoxChannel`.

Preparing a seal. Everything public-key in a sealed box (the ephemeral key pair, the X25519
agreement with the recipient, the nonce) depends only on the recipient's key, not on the payload,
so a device can do it before it has anything to send: :meth:`SealedBoxChannel.prepare_seals` makes
that key material (from a :class:`RandomSource`), and :meth:`SealedBoxChannel.seal_prepared`
later encrypts one payload under it with XSalsa20-Poly1305 alone (~4 µs instead of ~50 µs). The
result is byte-for-byte a ``crypto_box_seal`` box — the recipient opens it as any other — and each
prepared seal is used at most once, since a second payload under the same key and nonce would
break the cipher.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from nacl.bindings import crypto_box_beforenm, crypto_box_easy_afternm, crypto_box_seed_keypair
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox

from primitives.errors import DecodeError, InvalidInputError, ProtocolStateError
from primitives.randomness import RandomSource
from primitives.secret import Secret

KEY_SIZE = 32
#: Bytes a sealed box adds to its plaintext: ephemeral public key (32) + Poly1305 tag (16).
SEAL_OVERHEAD = 48


@runtime_checkable
class Channel(Protocol):
    """Public-key encryption of user→server payloads: the ``channel`` family's contract.

    Factory convention: the registry entry is called with no arguments (``factory()``) once per
    run. The methods below are exactly those the protocol calls (key generation at set-up, a
    device's prepared seals, a server's batch opening); a convenience such as a one-shot
    ``seal``/``open`` may exist on an implementation but is not part of the contract.

    ``overhead`` is the contract on sizes: every ciphertext is ``len(plaintext) + overhead`` bytes,
    whatever the plaintext and key. Cover messages are sized to match real shares before sealing
    (:meth:`fre_protocol.roles.user.User._cover_messages`), so a channel whose ciphertext length
    varied by anything but the plaintext length would tell the servers which is which.
    """

    @property
    def name(self) -> str: ...

    @property
    def overhead(self) -> int:
        """Ciphertext length minus plaintext length (fixed)."""
        ...

    def generate_keypair(self, rng: RandomSource | None = None) -> tuple[Secret[bytes], bytes]:
        """``(private key, public key)`` of a receiving server; from ``rng`` in seeded runs."""
        ...

    def prepare_seals(self, public_key: bytes, count: int, rng: RandomSource) -> list[Any]:
        """Key material for ``count`` later single-use seals to ``public_key``, made before the
        payloads exist (a device's offline work); randomness from ``rng``."""
        ...

    def skip_seals(self, count: int, rng: RandomSource) -> None:
        """Draw from ``rng`` exactly what :meth:`prepare_seals` of ``count`` seals would, making
        none: a driver that re-derives a device's later key material from its stream skips the
        earlier seals without paying for them."""
        ...

    def seal_prepared(self, prepared: Any, plaintext: bytes) -> bytes:
        """The ciphertext of ``plaintext`` under one item of :meth:`prepare_seals`, used once
        (a second use raises ProtocolStateError)."""
        ...

    def try_open_many(
        self, private_key: Secret[bytes] | bytes, ciphertexts: Sequence[bytes]
    ) -> list[bytes | DecodeError]:
        """Open a batch, each bad ciphertext (tampered, truncated, sealed to another key) a
        DecodeError in its place."""
        ...


class OneTimeKey:
    """A symmetric key for one box, revealed once: a second :meth:`take` raises
    ProtocolStateError (a second payload under the same key and nonce would break the cipher).
    Shared by every channel's prepared seals."""

    __slots__ = ("_key", "_used", "_lock")

    def __init__(self, key: Secret[bytes]) -> None:
        self._key = key
        self._used = False
        self._lock = threading.Lock()

    @property
    def used(self) -> bool:
        return self._used

    def take(self) -> bytes:
        with self._lock:
            if self._used:
                raise ProtocolStateError(
                    "prepared seal must be used once, got a second payload for it (nonce reuse)"
                )
            self._used = True
            key = self._key.reveal()
            self._key = Secret(b"")
        return key


class PreparedSeal:
    """Key material for one sealed box to one recipient, made before the payload exists.

    Holds the ephemeral public key, the nonce ``BLAKE2b-192(epk || recipient)`` and the
    precomputed X25519 box key (a :class:`OneTimeKey`). Single use: a second
    :meth:`SealedBoxChannel.seal_prepared` with it raises ProtocolStateError.
    """

    __slots__ = ("recipient", "_ephemeral_public", "_nonce", "_key")

    def __init__(self, recipient: bytes, ephemeral_public: bytes, nonce: bytes, key: Secret[bytes]) -> None:
        self.recipient = recipient
        self._ephemeral_public = ephemeral_public
        self._nonce = nonce
        self._key = OneTimeKey(key)

    @property
    def used(self) -> bool:
        return self._key.used

    def take(self) -> tuple[bytes, bytes, bytes]:
        """``(ephemeral public key, nonce, box key)``, once; the key is dropped afterwards."""
        return self._ephemeral_public, self._nonce, self._key.take()

    def __repr__(self) -> str:  # never shows key material
        return f"PreparedSeal(used={self.used})"


def check_public_key(public_key: bytes) -> bytes:
    """An X25519 public key as bytes (every channel's recipient check)."""
    if not isinstance(public_key, bytes | bytearray):
        raise InvalidInputError(f"public_key must be bytes, got {type(public_key).__name__}")
    if len(public_key) != KEY_SIZE:
        raise DecodeError(f"public_key must be {KEY_SIZE} bytes, got {len(public_key)} bytes")
    return bytes(public_key)


def _public_key(public_key: bytes) -> PublicKey:
    return PublicKey(check_public_key(public_key))


def _private_key(private_key: Secret[bytes] | bytes) -> PrivateKey:
    raw = private_key.reveal() if isinstance(private_key, Secret) else private_key
    if not isinstance(raw, bytes | bytearray):
        raise InvalidInputError(f"private_key must be bytes, got {type(raw).__name__}")
    if len(raw) != KEY_SIZE:
        # The length of a key is not secret; its bytes are, and are never echoed.
        raise InvalidInputError(f"private_key must be {KEY_SIZE} bytes, got {len(raw)} bytes")
    return PrivateKey(bytes(raw))


def _check_plaintext(plaintext: bytes, what: str = "plaintext") -> bytes:
    if not isinstance(plaintext, bytes | bytearray | memoryview):
        raise InvalidInputError(f"{what} must be bytes, got {type(plaintext).__name__}")
    return bytes(plaintext)


class SealedBoxChannel:
    """libsodium sealed boxes (pynacl ``SealedBox``) to a server's X25519 public key."""

    __slots__ = ()
    name: ClassVar[str] = "sealed-box"
    overhead: ClassVar[int] = SEAL_OVERHEAD

    def generate_keypair(self, rng: RandomSource | None = None) -> tuple[Secret[bytes], bytes]:
        """A fresh X25519 key pair: from libsodium's CSPRNG, or from ``rng`` in seeded test runs."""
        if rng is None:
            key = PrivateKey.generate()
        else:
            key = PrivateKey.from_seed(rng.random_bytes(KEY_SIZE))
        return Secret(bytes(key)), bytes(key.public_key)

    def public_key(self, private_key: Secret[bytes] | bytes) -> bytes:
        """The public key belonging to ``private_key``."""
        return bytes(_private_key(private_key).public_key)

    def seal(self, public_key: bytes, plaintext: bytes) -> bytes:
        """``len(plaintext) + 48`` bytes that only the private key's holder can open."""
        return self._seal_with(SealedBox(_public_key(public_key)), _check_plaintext(plaintext))

    def prepare_seals(self, public_key: bytes, count: int, rng: RandomSource) -> list[PreparedSeal]:
        """``count`` single-use :class:`PreparedSeal` to ``public_key``; ephemeral keys from ``rng``
        (a cryptographic source, or a seeded one in test mode, which makes the boxes reproducible)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInputError(f"count must be an integer >= 0, got {count!r}")
        recipient = bytes(_public_key(public_key))
        seeds = rng.random_bytes(KEY_SIZE * count)
        out: list[PreparedSeal] = []
        for k in range(count):
            epk, esk = crypto_box_seed_keypair(seeds[KEY_SIZE * k : KEY_SIZE * (k + 1)])
            try:
                key = crypto_box_beforenm(recipient, esk)
            except CryptoError as exc:
                raise DecodeError("public_key is not a usable X25519 public key") from exc
            # libsodium's crypto_box_seal nonce: unkeyed BLAKE2b with a 24-byte output.
            nonce = hashlib.blake2b(epk + recipient, digest_size=24).digest()
            out.append(PreparedSeal(recipient, epk, nonce, Secret(key)))
        return out

    def skip_seals(self, count: int, rng: RandomSource) -> None:
        """Advance ``rng`` past :meth:`prepare_seals` of ``count`` seals (one ephemeral seed each)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInputError(f"count must be an integer >= 0, got {count!r}")
        rng.random_bytes(KEY_SIZE * count)

    def seal_prepared(self, prepared: PreparedSeal, plaintext: bytes) -> bytes:
        """The sealed box of ``plaintext`` under ``prepared`` (identical in format to :meth:`seal`)."""
        if not isinstance(prepared, PreparedSeal):
            raise InvalidInputError(f"prepared must be a PreparedSeal, got {type(prepared).__name__}")
        data = _check_plaintext(plaintext)
        epk, nonce, key = prepared.take()
        return epk + bytes(crypto_box_easy_afternm(data, nonce, key))

    def open(self, private_key: Secret[bytes] | bytes, ciphertext: bytes) -> bytes:
        """Open a sealed box; a truncated, tampered or misaddressed box raises DecodeError."""
        return self._open_with(SealedBox(_private_key(private_key)), ciphertext)

    def seal_many(self, public_key: bytes, plaintexts: Iterable[bytes]) -> list[bytes]:
        """:meth:`seal` over a batch to one recipient (the key is parsed once)."""
        box = SealedBox(_public_key(public_key))
        return [
            self._seal_with(box, _check_plaintext(pt, f"plaintext {k}"))
            for k, pt in enumerate(plaintexts)
        ]

    def open_many(
        self, private_key: Secret[bytes] | bytes, ciphertexts: Sequence[bytes]
    ) -> list[bytes]:
        """:meth:`open` over a batch; the first bad box raises DecodeError naming its index."""
        box = SealedBox(_private_key(private_key))
        out: list[bytes] = []
        for k, ciphertext in enumerate(ciphertexts):
            try:
                out.append(self._open_with(box, ciphertext))
            except DecodeError as exc:
                raise DecodeError(f"ciphertext {k}: {exc}") from exc
        return out

    def try_open_many(
        self, private_key: Secret[bytes] | bytes, ciphertexts: Sequence[bytes]
    ) -> list[bytes | DecodeError]:
        """Like :meth:`open_many`, but a bad box yields its DecodeError in place of a plaintext,
        so one malformed message cannot stop a server from processing the rest of a batch."""
        box = SealedBox(_private_key(private_key))
        out: list[bytes | DecodeError] = []
        for ciphertext in ciphertexts:
            try:
                out.append(self._open_with(box, ciphertext))
            except DecodeError as exc:
                out.append(exc)
        return out

    @staticmethod
    def _seal_with(box: SealedBox[PublicKey], plaintext: bytes) -> bytes:
        try:
            return bytes(box.encrypt(plaintext))
        except CryptoError as exc:
            # libsodium refuses low-order public keys (an all-zero shared secret).
            raise DecodeError("public_key is not a usable X25519 public key") from exc

    @staticmethod
    def _open_with(box: SealedBox[PrivateKey], ciphertext: bytes) -> bytes:
        if not isinstance(ciphertext, bytes | bytearray | memoryview):
            raise DecodeError(f"ciphertext must be bytes, got {type(ciphertext).__name__}")
        if len(ciphertext) < SEAL_OVERHEAD:
            raise DecodeError(
                f"ciphertext must be at least {SEAL_OVERHEAD} bytes, got {len(ciphertext)} bytes"
            )
        try:
            return bytes(box.decrypt(bytes(ciphertext)))
        except CryptoError as exc:
            raise DecodeError(
                "ciphertext failed authentication: tampered, truncated or sealed to another key"
            ) from exc

    def __repr__(self) -> str:
        return "SealedBoxChannel()"


__all__ = ["KEY_SIZE", "SEAL_OVERHEAD", "Channel", "PreparedSeal", "SealedBoxChannel"]
