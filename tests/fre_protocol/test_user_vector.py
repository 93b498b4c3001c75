"""One user's device (tests/vectors/user) replayed byte for byte through the user role.

Each case gives the round document, the device's embedding and coin, S_tag's answer, the compact
broadcast and the randomness the device drew (its streams as a tape): a population of one played
with that tape must send exactly the recorded envelopes. The randomness recorded by purpose
(blind scalar, ephemeral sealing keys, token, rounding coins, noise, share seed, contribution id,
cover tokens), which a client in another language injects, is checked against the tape and the
messages: each envelope is its plaintext sealed under its recorded ephemeral key, and the
shares add up to the recorded encoding. A changed byte of the tape changes a message.
"""

from __future__ import annotations

import hashlib
from typing import Any

import known_answers
import numpy as np
import pytest
from nacl.bindings import crypto_box_beforenm, crypto_box_easy_afternm, crypto_box_seed_keypair
from user_vectors import FORMAT, VECTOR_DIR, TapeSource, play_device

from fre_protocol.drivers.net.round import RoundDocument
from fre_protocol.messages import (
    BlindRequest,
    ShareSubmission,
    TagSubmission,
    decode_as,
    token_hash,
)
from primitives.sharing.seeded import expand_seed

FILE = "user/device.json"
_L = 2**252 + 27742317777372353535851937790883648493


@pytest.fixture(scope="module")
def vector() -> dict[str, Any]:
    data = known_answers.load(FILE)
    assert data["format"] == FORMAT
    return data


def _tape(case: dict[str, Any]) -> dict[str, bytes]:
    return {label: bytes.fromhex(h) for label, h in case["randomness"]["tape"].items()}


def _play(vector: dict[str, Any], case: dict[str, Any], tape: dict[str, bytes]) -> list[tuple[str, bytes]]:
    inputs = case["inputs"]
    first = bytes.fromhex(case["messages"][0]["envelope"])

    def evaluation(envelope: bytes) -> bytes:
        # S_tag's recorded answer is to the recorded request only.
        return bytes.fromhex(inputs["evaluation"]) if envelope == first else b"\x00"

    played = play_device(vector["round"], inputs["embedding"], case["randomness"]["coin"], TapeSource(tape),
                         evaluation=evaluation, broadcast=bytes.fromhex(inputs["broadcast"]))
    return played.sent


def test_the_readme_lists_the_files_checksum() -> None:
    readme = (VECTOR_DIR / "README.md").read_text(encoding="utf-8")
    digest = hashlib.sha256((VECTOR_DIR / "device.json").read_bytes()).hexdigest()
    assert f"- `device.json`: `{digest}`" in readme


@pytest.mark.parametrize("name", ["released", "unreleased", "not_sampled"])
def test_the_user_role_replays_the_device_byte_for_byte(vector: dict[str, Any], name: str) -> None:
    case = next(c for c in vector["cases"] if c["name"] == name)
    sent = _play(vector, case, _tape(case))
    want = [(m["step"], bytes.fromhex(m["envelope"])) for m in case["messages"]]
    assert [s for s, _ in sent] == [s for s, _ in want]
    for k, ((_, got), (step, expected)) in enumerate(zip(sent, want, strict=True)):
        assert got == expected, f"message {k} ({step}) differs"


def test_a_changed_byte_of_randomness_changes_the_messages(vector: dict[str, Any]) -> None:
    case = next(c for c in vector["cases"] if c["name"] == "released")
    want = [bytes.fromhex(m["envelope"]) for m in case["messages"]]
    # The token's first byte, the share seed's last (a coin's low 11 bits are dropped: not those).
    for label, at in (("token/0", 0), ("phase2/0", -17), ("prepare/0", 100)):
        tape = _tape(case)
        data = bytearray(tape[label])
        data[at] ^= 1
        tape[label] = bytes(data)
        got = [env for _, env in _play(vector, case, tape)]
        assert got != want, label


@pytest.mark.parametrize("name", ["released", "unreleased", "not_sampled"])
def test_the_randomness_by_purpose_is_the_tapes_and_makes_the_messages(vector: dict[str, Any], name: str) -> None:
    case = next(c for c in vector["cases"] if c["name"] == name)
    rnd, derived = case["randomness"], case["derived"]
    tape = _tape(case)
    doc = RoundDocument.from_dict(vector["round"])
    # The blind: 64 bytes of its stream reduced mod the group order.
    assert int.from_bytes(bytes.fromhex(rnd["blind_scalar_bytes"]), "little") % _L == int.from_bytes(
        bytes.fromhex(rnd["blind_scalar"]), "little")
    assert tape["prepare/0"].startswith(bytes.fromhex(rnd["blind_scalar_bytes"]))
    # Each envelope: its plaintext sealed under its recorded ephemeral key (libsodium's crypto_box_seal).
    recipients = {"S_tag": doc.tag_box_key, "S_syn": doc.syn_box_key}
    kinds = ["blind_request"] + (["tag_submission"] if rnd["coin"] else []) + ["share_to_tag", "share_to_syn"]
    for kind, message, plaintext in zip(kinds, case["messages"], case["plaintexts"], strict=True):
        seed = bytes.fromhex(rnd["seal_seeds"][kind])
        epk, esk = crypto_box_seed_keypair(seed)
        assert (epk.hex(), esk.hex()) == (rnd["seal_ephemeral"][kind]["public_key"], rnd["seal_ephemeral"][kind]["secret_key"])
        assert esk == hashlib.sha512(seed).digest()[:32]
        pk = recipients[message["recipient"]]
        nonce = hashlib.blake2b(epk + pk, digest_size=24).digest()
        sealed = epk + crypto_box_easy_afternm(bytes.fromhex(plaintext), nonce, crypto_box_beforenm(pk, esk))
        assert bytes.fromhex(message["envelope"]).endswith(sealed)
    request = decode_as(bytes.fromhex(case["plaintexts"][0]), BlindRequest)
    assert request.blinded_element.hex() == derived["blinded_element"]
    if rnd["coin"]:
        submission = decode_as(bytes.fromhex(case["plaintexts"][1]), TagSubmission)
        assert submission.tag.hex() == derived["tag"]
        assert submission.token_hash == token_hash(bytes.fromhex(rnd["token"]))
        assert tape["token/0"] == bytes.fromhex(rnd["token"])
    if not derived["contributes"]:
        assert [t for t in rnd["cover_tokens"]] == [tape["cover_token/0"][:32].hex(), tape["cover_token/0"][32:64].hex()]
        return
    bits = int(derived["ddg_config"]["modulus_bits"])
    mask = (1 << bits) - 1
    quantized, noise = np.array(derived["quantized"], dtype=object), np.array(rnd["noise"], dtype=object)
    assert [int(v) & mask for v in quantized + noise] == derived["encoded"]
    first, second = (decode_as(bytes.fromhex(p), ShareSubmission) for p in case["plaintexts"][-2:])
    assert first.share.hex() == rnd["share_seed"] and first.contribution_id.hex() == rnd["contribution_id"]
    assert first.token.hex() == second.token.hex() == rnd["token"]
    mask_words = expand_seed(first.share, len(derived["encoded"]), bits)
    words = [int.from_bytes(second.share[3 * i : 3 * i + 3], "little") for i in range(len(derived["encoded"]))]
    assert [(int(m) + w) & mask for m, w in zip(mask_words, words, strict=True)] == derived["encoded"]
    assert tape["phase2/0"].startswith(bytes.fromhex(rnd["rounding_bytes"]))
    assert tape["phase2/0"].endswith(bytes.fromhex(rnd["share_seed"]) + bytes.fromhex(rnd["contribution_id"]))
