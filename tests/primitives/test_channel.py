"""The sealed channel: round trips, 48-byte overhead, and DecodeError on tampering, truncation,
wrong keys and malformed keys — without key material in any message (design §5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primitives import registry
from primitives.channel import KEY_SIZE, SEAL_OVERHEAD, Channel, SealedBoxChannel
from primitives.errors import DecodeError, InvalidInputError, ProtocolStateError
from primitives.randomness import RandomSource
from primitives.secret import Secret

CHANNEL = SealedBoxChannel()
SK, PK = CHANNEL.generate_keypair(RandomSource.seeded(1, "server"))


@settings(max_examples=40)
@given(st.binary(max_size=5000))
def test_round_trip_and_overhead(plaintext: bytes) -> None:
    ciphertext = CHANNEL.seal(PK, plaintext)
    assert len(ciphertext) == len(plaintext) + SEAL_OVERHEAD == len(plaintext) + CHANNEL.overhead
    assert CHANNEL.open(SK, ciphertext) == plaintext
    assert CHANNEL.open(SK.reveal(), ciphertext) == plaintext  # raw bytes accepted too


def test_keypairs() -> None:
    sk, pk = CHANNEL.generate_keypair()
    assert isinstance(sk, Secret) and len(sk.reveal()) == len(pk) == KEY_SIZE
    assert CHANNEL.public_key(sk) == pk
    assert sk.reveal().hex() not in repr(sk)
    assert CHANNEL.generate_keypair()[1] != pk  # fresh from the OS CSPRNG
    # Seeded test mode is reproducible.
    again = CHANNEL.generate_keypair(RandomSource.seeded(1, "server"))
    assert again[1] == PK and again[0] == SK


def test_sealing_is_randomized() -> None:
    assert CHANNEL.seal(PK, b"same") != CHANNEL.seal(PK, b"same")


@pytest.mark.parametrize("position", [0, 31, 32, 47, 48, 60])
def test_any_flipped_bit_is_rejected(position: int) -> None:
    """Ephemeral key (0..31), tag (32..47) and body (48..) are all authenticated."""
    ciphertext = bytearray(CHANNEL.seal(PK, b"a share of 13 bytes"[:13]))
    ciphertext[position] ^= 0x01
    with pytest.raises(DecodeError, match="failed authentication"):
        CHANNEL.open(SK, bytes(ciphertext))


def test_truncated_and_extended_ciphertexts_are_rejected() -> None:
    ciphertext = CHANNEL.seal(PK, b"payload")
    for bad in (b"", ciphertext[:10], ciphertext[: SEAL_OVERHEAD - 1]):
        with pytest.raises(DecodeError, match=f"at least {SEAL_OVERHEAD} bytes, got {len(bad)}"):
            CHANNEL.open(SK, bad)
    for bad in (ciphertext[:-1], ciphertext + b"\x00", ciphertext[:SEAL_OVERHEAD]):
        with pytest.raises(DecodeError, match="failed authentication"):
            CHANNEL.open(SK, bad)


def test_wrong_key_is_rejected_without_leaking_keys() -> None:
    other_sk, _ = CHANNEL.generate_keypair(RandomSource.seeded(2, "other"))
    ciphertext = CHANNEL.seal(PK, b"for the first server")
    with pytest.raises(DecodeError) as info:
        CHANNEL.open(other_sk, ciphertext)
    message = str(info.value)
    for secret in (other_sk.reveal(), SK.reveal(), PK):
        assert secret.hex() not in message and repr(secret) not in message


def test_malformed_keys() -> None:
    with pytest.raises(DecodeError, match="public_key must be 32 bytes, got 31 bytes"):
        CHANNEL.seal(bytes(31), b"x")
    with pytest.raises(InvalidInputError, match="public_key must be bytes"):
        CHANNEL.seal("pk", b"x")  # type: ignore[arg-type]
    with pytest.raises(DecodeError, match="not a usable X25519 public key"):
        CHANNEL.seal(bytes(32), b"x")  # the all-zero, low-order point
    with pytest.raises(
        InvalidInputError, match="private_key must be 32 bytes, got 3 bytes"
    ) as info:
        CHANNEL.open(Secret(b"abc"), CHANNEL.seal(PK, b"x"))
    assert "abc" not in str(info.value)
    with pytest.raises(DecodeError, match="ciphertext must be bytes"):
        CHANNEL.open(SK, "text")  # type: ignore[arg-type]


def test_batches() -> None:
    plaintexts = [bytes([k]) * k for k in range(10)]
    ciphertexts = CHANNEL.seal_many(PK, plaintexts)
    assert [len(c) for c in ciphertexts] == [k + SEAL_OVERHEAD for k in range(10)]
    assert CHANNEL.open_many(SK, ciphertexts) == plaintexts
    broken = list(ciphertexts)
    broken[4] = broken[4][:-1] + bytes([broken[4][-1] ^ 1])
    with pytest.raises(DecodeError, match="ciphertext 4: .*failed authentication"):
        CHANNEL.open_many(SK, broken)
    results = CHANNEL.try_open_many(SK, broken)
    assert isinstance(results[4], DecodeError)
    assert [r for k, r in enumerate(results) if k != 4] == plaintexts[:4] + plaintexts[5:]


def test_registry_and_protocol_conformance() -> None:
    channel = registry.create("channel", "sealed-box")
    assert isinstance(channel, SealedBoxChannel) and isinstance(channel, Channel)
    assert channel.name == "sealed-box" and channel.overhead == 48


@settings(max_examples=30)
@given(st.binary(max_size=4000))
def test_prepared_seal_is_a_sealed_box(plaintext: bytes) -> None:
    (prepared,) = CHANNEL.prepare_seals(PK, 1, RandomSource.seeded(7, "device"))
    ciphertext = CHANNEL.seal_prepared(prepared, plaintext)
    assert len(ciphertext) == len(plaintext) + SEAL_OVERHEAD
    # The recipient opens it with the ordinary sealed-box open (libsodium crypto_box_seal_open).
    assert CHANNEL.open(SK, ciphertext) == plaintext
    assert CHANNEL.try_open_many(SK, [ciphertext]) == [plaintext]


def test_prepared_seals_are_distinct_reproducible_and_single_use() -> None:
    seals = CHANNEL.prepare_seals(PK, 3, RandomSource.seeded(7, "device"))
    again = CHANNEL.prepare_seals(PK, 3, RandomSource.seeded(7, "device"))
    boxes = [CHANNEL.seal_prepared(s, b"same payload") for s in seals]
    assert len(set(boxes)) == 3  # fresh ephemeral key per seal
    assert [CHANNEL.seal_prepared(s, b"same payload") for s in again] == boxes  # seeded: reproducible
    assert all(s.used for s in seals) and "Secret" not in repr(seals[0])
    with pytest.raises(ProtocolStateError, match="used once"):
        CHANNEL.seal_prepared(seals[0], b"a second payload")
    fresh = CHANNEL.prepare_seals(PK, 1, RandomSource.cryptographic("device"))[0]
    assert CHANNEL.open(SK, CHANNEL.seal_prepared(fresh, b"x")) == b"x"


def test_prepared_seal_bad_input() -> None:
    rng = RandomSource.seeded(1, "device")
    with pytest.raises(InvalidInputError, match="count must be an integer >= 0, got -1"):
        CHANNEL.prepare_seals(PK, -1, rng)
    with pytest.raises(DecodeError, match="public_key must be 32 bytes, got 31 bytes"):
        CHANNEL.prepare_seals(bytes(31), 1, rng)
    with pytest.raises(DecodeError, match="not a usable X25519 public key"):
        CHANNEL.prepare_seals(bytes(32), 1, rng)
    with pytest.raises(InvalidInputError, match="prepared must be a PreparedSeal, got bytes"):
        CHANNEL.seal_prepared(PK, b"x")  # type: ignore[arg-type]
    assert CHANNEL.prepare_seals(PK, 0, rng) == []
