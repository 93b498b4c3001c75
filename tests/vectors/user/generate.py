"""Write the user-side known-answer vectors of this folder (see README.md): one device played
through the user role (a population of one) with its randomness recorded, three cases.

Run from the repository root with the project's Python: ``.venv/bin/python
tests/vectors/user/generate.py``. The output is a function of the code alone (seeded streams,
sorted keys); it prints the file's sha256 for the README and ``tests/support/known_answers.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

import numpy as np  # noqa: E402
from known_answers import write_vector  # noqa: E402
from nacl.bindings import crypto_box_seed_keypair  # noqa: E402
from user_vectors import FORMAT, VECTOR_DIR, RecordingSource, TapeSource, play_device  # noqa: E402

from fre_protocol.components import build_components  # noqa: E402
from fre_protocol.drivers.net.round import RoundDocument, RoundSettings  # noqa: E402
from fre_protocol.drivers.net.wire import encode_batch  # noqa: E402
from fre_protocol.messages import (  # noqa: E402
    BlindRequest,
    Evaluation,
    Role,
    SealedEnvelope,
    decode_as,
    tag_of,
)
from fre_protocol.roles.broadcast import broadcast_seed, build_message, encoding  # noqa: E402
from fre_protocol.roles.config import ProtocolConfig  # noqa: E402
from fre_protocol.roles.round import box_key, tagging_key  # noqa: E402
from mechanism.params import FreParams  # noqa: E402
from mechanism.seeds import SeedPlan  # noqa: E402
from primitives.randomness import RandomSource  # noqa: E402

SEED = 36
DIM = 16
FILE = "device.json"
#: (name, the device's coin, whether the broadcast releases its tag)
CASES = (("released", True, True), ("unreleased", True, False), ("not_sampled", False, False))


def unseal(channel: Any, sk: Any, envelope: bytes) -> bytes:
    return channel.open(sk, decode_as(envelope, SealedEnvelope).ciphertext)


def case(name: str, coin: bool, released: bool, doc: RoundDocument, secrets: dict[str, Any]) -> dict[str, Any]:
    comps = build_components(doc.settings.components)
    suite, channel = comps.suite, comps.channel
    rng = RandomSource.seeded(SEED, f"user-vector/embedding/{name}")
    v = rng.normal(DIM)
    embedding = (v / np.linalg.norm(v)).tolist()

    def evaluate(envelope: bytes) -> bytes:
        blinded = decode_as(unseal(channel, secrets["tag_box"], envelope), BlindRequest).blinded_element
        ((evaluated, proof),) = suite.blind_evaluate_each(
            secrets["voprf"], [blinded], [RandomSource.seeded(SEED, f"user-vector/proof/{name}")]
        )
        return Evaluation(evaluated_element=evaluated, proof=proof).encode()

    # The broadcast: three other tags and, in the released case, the device's own (count 25).
    others = RandomSource.seeded(SEED, f"user-vector/other-tags/{name}").random_bytes(3 * 32)
    counts = {others[32 * k : 32 * k + 32]: c for k, c in enumerate((21, 30, 47))}
    enc = encoding(doc.settings.components["broadcast"])
    probe = play_device(doc.to_dict(), embedding, coin, RandomSource.seeded(SEED, "probe"),
                        evaluation=evaluate, broadcast=build_message({}, enc, b"\0" * 32))
    own_tag = tag_of(suite.evaluate(secrets["voprf"], probe.encoding))
    if released:
        counts[own_tag] = 25
    broadcast = build_message(counts, enc, broadcast_seed(doc.settings.public_seed))

    log: dict[str, bytes] = {}
    recorder = RecordingSource(RandomSource.seeded(SEED, f"user-vector/device/{name}"), log)
    played = play_device(doc.to_dict(), embedding, coin, recorder, evaluation=evaluate, broadcast=broadcast)
    again = play_device(doc.to_dict(), embedding, coin, TapeSource(log), evaluation=evaluate, broadcast=broadcast)
    if again.sent != played.sent:
        raise RuntimeError(f"{name}: the tape does not replay the recorded run")
    users = played.users
    assert users is not None
    if users.status[0] != "ok" or users.tags[0] != own_tag:
        raise RuntimeError(f"{name}: the device did not finalize its tag ({users.status[0]})")

    # The randomness it drew, by purpose (a client in another language injects these).
    prepare = log["prepare/0"]
    kinds = ["blind_request"] + (["tag_submission"] if coin else []) + ["share_to_tag", "share_to_syn"]
    seal_seeds = {k: prepare[64 + 32 * j : 96 + 32 * j] for j, k in enumerate(kinds)}
    if len(prepare) != 64 + 32 * len(kinds):
        raise RuntimeError(f"{name}: prepare drew {len(prepare)} bytes")
    randomness: dict[str, Any] = {
        "coin": coin,
        "blind_scalar": users.blinds[0].hex(),
        "blind_scalar_bytes": prepare[:64].hex(),
        "seal_seeds": {k: s.hex() for k, s in seal_seeds.items()},
        "seal_ephemeral": {
            k: dict(zip(("public_key", "secret_key"), (x.hex() for x in crypto_box_seed_keypair(s)), strict=True))
            for k, s in seal_seeds.items()
        },
        "tape": {label: data.hex() for label, data in sorted(log.items())},
    }
    if coin:
        randomness["token"] = users.tokens[0].hex()
    derived: dict[str, Any] = {
        "bucket_encoding": played.encoding.hex(),
        "blinded_element": users.blinded[0].hex(),
        "tag": own_tag.hex(),
        "count": users.heard.query(own_tag) if users.heard is not None else None,
        "contributes": bool(users.participants.size),
    }
    plan = played.plan
    derived["ddg_config"] = plan.ddg_config.to_dict()
    derived["share_sizes"] = list(plan.sharing.share_sizes(int(plan.ddg_config.padded_dim)))
    if users.participants.size:
        sigma = float(plan.sigmas.get(own_tag, float(plan.ddg_config.sigma_int)))
        x = np.asarray([embedding])
        tape = TapeSource(log, "phase2/0")
        quantized = plan.encoder.quantize(x, tape)
        rounding_end = tape._at
        encoded = plan.encoder.encode(x, TapeSource(log, "phase2/0"), noise=True, sigma_int=[sigma])
        modulus = 1 << int(plan.ddg_config.modulus_bits)
        noise = (encoded[0].astype(object) - quantized[0].astype(object)) % modulus
        noise = [int(n) - modulus if n >= modulus // 2 else int(n) for n in noise]
        phase2 = log["phase2/0"]
        randomness["rounding_bytes"] = phase2[:rounding_end].hex()
        randomness["noise"] = noise
        randomness["share_seed"] = phase2[-48:-16].hex()
        randomness["contribution_id"] = phase2[-16:].hex()
        derived.update(sigma_int=sigma, quantized=[int(q) for q in quantized[0]],
                       encoded=[int(e) for e in encoded[0]])
    else:
        cover = log["cover_token/0"]
        randomness["cover_tokens"] = [cover[:32].hex(), cover[32:64].hex()]
    sent, plaintexts = [], []
    keys = {Role.S_TAG: secrets["tag_box"], Role.S_SYN: secrets["syn_box"]}
    for step, envelope in played.sent:
        env = decode_as(envelope, SealedEnvelope)
        sent.append({"step": step, "recipient": env.recipient.label, "envelope": envelope.hex()})
        plaintexts.append(channel.open(keys[env.recipient], env.ciphertext).hex())
    phase2 = [bytes.fromhex(s["envelope"]) for s in sent if s["step"] == "phase2"]
    return {
        "name": name,
        "inputs": {"embedding": embedding, "evaluation": evaluate(bytes.fromhex(sent[0]["envelope"])).hex(),
                   "broadcast": broadcast.hex()},
        "randomness": randomness,
        "derived": derived,
        "messages": sent,
        "plaintexts": plaintexts,
        "phase2_body": encode_batch(phase2).hex(),
    }


def main() -> None:
    seeds = SeedPlan.from_seed(SEED)
    settings = RoundSettings(
        round_id="user-vector", params=FreParams(epsilon=16.0, delta=0.01, p_sample=0.5, threshold=20),
        public_seed=seeds.public_seed, rng_mode="crypto", dim=DIM, noise=True,
        # One device per chunk: its cover tokens are a 64-byte draw (a chunk of 1,024 draws 64 KiB).
        protocol=ProtocolConfig(chunk_size=1),
    )
    comps = build_components(settings.components)
    voprf_sk, voprf_pk = tagging_key(seeds, comps.suite)
    tag_sk, tag_pk = box_key(seeds, comps.channel, Role.S_TAG)
    syn_sk, syn_pk = box_key(seeds, comps.channel, Role.S_SYN)
    doc = RoundDocument(settings=settings, voprf_public_key=voprf_pk, tag_box_key=tag_pk, syn_box_key=syn_pk)
    secrets = {"voprf": voprf_sk, "tag_box": tag_sk, "syn_box": syn_sk}
    data = {
        "format": FORMAT,
        "description": (
            "One user's device through the user role (a population of one): the round document, its "
            "embedding, S_tag's answer and the compact broadcast; the randomness it drew (per stream, "
            "and by purpose); every message it sent. Cases: released (shares), unreleased (cover), "
            "not sampled (no submission, cover)."
        ),
        "round": doc.to_dict(),
        "cases": [case(name, coin, released, doc, secrets) for name, coin, released in CASES],
    }
    write_vector(VECTOR_DIR / FILE, data)


if __name__ == "__main__":
    main()
