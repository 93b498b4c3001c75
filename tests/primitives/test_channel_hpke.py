"""The HPKE channel (RFC 9180 base mode, X25519 / HKDF-SHA256 / AES-128-GCM): the RFC's A.1.1
vector value by value, interoperability with cryptography's own HPKE where it has one, and the
channel contract's properties (also run by the conformance suite)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from fre_protocol.testing import conformance
from fre_protocol.testing.vectors import load
from primitives import registry
from primitives.channel import SealedBoxChannel
from primitives.channel_hpke import (
    HPKE_OVERHEAD,
    INFO,
    HpkeChannel,
    _context,
    derive_key_pair,
    key_schedule,
    labeled_extract,
    shared_secret,
)
from primitives.errors import DecodeError
from primitives.randomness import RandomSource
from primitives.secret import Secret

V = load("rfc9180/x25519-sha256-aes128gcm-base.json")
h = bytes.fromhex


def test_rfc9180_a11_derive_key_pair() -> None:
    assert derive_key_pair(h(V["ikmE"])) == (h(V["skEm"]), h(V["pkEm"]))
    assert derive_key_pair(h(V["ikmR"])) == (h(V["skRm"]), h(V["pkRm"]))


def test_rfc9180_a11_encap_and_key_schedule() -> None:
    dh = X25519PrivateKey.from_private_bytes(h(V["skEm"])).exchange(
        X25519PrivateKey.from_private_bytes(h(V["skRm"])).public_key()
    )
    assert shared_secret(dh, h(V["enc"]), h(V["pkRm"])).hex() == V["shared_secret"]
    context = _context(h(V["info"]))
    assert context.hex() == V["key_schedule_context"]
    suite = b"HPKE" + bytes.fromhex("002000010001")
    assert labeled_extract(suite, h(V["shared_secret"]), b"secret", b"").hex() == V["secret"]
    key, nonce = key_schedule(h(V["shared_secret"]), context)
    assert (key.hex(), nonce.hex()) == (V["key"], V["base_nonce"])
    first = V["encryptions"][0]
    assert AESGCM(key).encrypt(nonce, h(first["pt"]), h(first["aad"])).hex() == first["ct"]


def test_the_channel_seals_what_the_rfc_derives() -> None:
    """prepare_seals from a source whose first 32 bytes are ikmE gives the RFC's enc; the box
    then opens with skRm (the channel's own info and empty aad)."""

    class Fixed(RandomSource):
        def __init__(self, data: bytes) -> None:
            self._data = data

        def random_bytes(self, n: int) -> bytes:
            out, self._data = self._data[:n], self._data[n:]
            return out

    channel = HpkeChannel()
    seal = channel.prepare_seals(h(V["pkRm"]), 1, Fixed(h(V["ikmE"])))[0]
    box = channel.seal_prepared(seal, b"payload")
    assert box[:32].hex() == V["enc"] and len(box) == len(b"payload") + HPKE_OVERHEAD
    assert channel.try_open_many(Secret(h(V["skRm"])), [box]) == [b"payload"]


def _library_suite():  # type: ignore[no-untyped-def]
    hpke = pytest.importorskip("cryptography.hazmat.primitives.hpke")
    return hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_128_GCM)


def test_cryptography_hpke_opens_our_boxes_and_we_open_its() -> None:
    suite = _library_suite()
    channel = HpkeChannel()
    sk, pk = channel.generate_keypair(RandomSource.seeded(1, "hpke/interop"))
    private = X25519PrivateKey.from_private_bytes(sk.reveal())
    box = channel.seal_prepared(channel.prepare_seals(pk, 1, RandomSource.seeded(2))[0], b"to the library")
    assert suite.decrypt(box, private, info=INFO) == b"to the library"
    theirs = suite.encrypt(b"from the library", private.public_key(), info=INFO)
    assert len(theirs) == len(b"from the library") + HPKE_OVERHEAD
    assert channel.try_open_many(sk, [theirs]) == [b"from the library"]
    other = suite.encrypt(b"other context", private.public_key(), info=b"another application")
    assert isinstance(channel.try_open_many(sk, [other])[0], DecodeError)


def test_registered_and_conforms() -> None:
    assert isinstance(registry.create("channel", "hpke"), HpkeChannel)
    report = conformance.check("channel", "hpke")
    assert report.ok, "\n".join(report.lines())


def test_same_sizes_as_the_sealed_box() -> None:
    """Cover traffic is sized from plaintexts: both channels add the same 48 bytes."""
    assert HpkeChannel.overhead == SealedBoxChannel.overhead == 48


def test_one_shot_helpers_and_low_order_keys() -> None:
    channel = HpkeChannel()
    sk, pk = channel.generate_keypair()
    assert channel.open(sk, channel.seal(pk, b"x")) == b"x"
    with pytest.raises(DecodeError):
        channel.prepare_seals(bytes(32), 1, RandomSource.seeded(3))  # the all-zero point
    with pytest.raises(DecodeError):
        channel.open(sk, bytes(32) + bytes(20))
