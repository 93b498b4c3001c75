"""Write the protocol test vectors of this folder (see README.md): seeded runs of
:func:`fre_protocol.drivers.inprocess.run_protocol` recorded as lists of operations, with failing cases.

Run from the repository root with the project's Python: ``.venv/bin/python
tests/vectors/protocol/generate.py``. The output is a function of the code alone (seeded runs,
sealed injections from a seeded source, sorted keys), so running it on an unchanged tree
rewrites the files byte for byte; it prints each file's sha256 for the README and
``tests/support/known_answers.py``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The replay helpers live with the test support code, which pytest puts on its path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

import numpy as np  # noqa: E402
from known_answers import write_vector  # noqa: E402
from protocol_vectors import (  # noqa: E402
    FORMAT,
    FORWARD,
    RESPONSE,
    VECTOR_DIR,
    Injection,
    Observed,
    VectorAdversary,
    compare_operations,
    compare_release,
    protocol_round,
    run_in_process,
)

from fre_protocol.components import DEFAULT_COMPONENTS, build_components  # noqa: E402
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.messages import (  # noqa: E402
    BlindRequest,
    Evaluation,
    Role,
    SealedEnvelope,
    ShareSubmission,
    decode_as,
)
from fre_protocol.roles.base import PHASE1, PHASE1_SUBMIT, PHASE2  # noqa: E402
from fre_protocol.roles.config import ProtocolConfig
from fre_protocol.roles.round import box_key
from mechanism.params import FreParams  # noqa: E402
from mechanism.population import Population, synthetic_population  # noqa: E402
from primitives.randomness import RandomSource  # noqa: E402

#: Connections of injected messages: above any user's index, so answers to them reach nobody.
INJECTED = 9000


def population(sizes: Sequence[int], n_rare: int, seed: int) -> Population:
    """Tight clusters (spread ≪ the bucket edge) in d = 8, each in one bucket, plus rare points."""
    return synthetic_population(
        len(sizes), list(sizes), n_rare, 8, 0.5, RandomSource.seeded(seed, "protocol-vector"),
        spread=0.01, cluster_dim=8,
    )


def inputs_for(pop: Population, params: FreParams, *, seed: int, noise: bool) -> dict[str, Any]:
    return {
        # float64 values of the float32 embeddings: exact in JSON, and what the run is given
        "embeddings": pop.embeddings.astype(np.float64).tolist(),
        "params": params.to_dict(),
        "seed": seed,
        "noise": noise,
        "components": dict(DEFAULT_COMPONENTS),
        "config": ProtocolConfig().to_dict(),
        # one worker: the recording order of a view is then the order the parties handle messages
        "workers": 1,
    }


class Tap(VectorAdversary):
    """Delivers the given injections and keeps what the users sent and were answered (to build
    further failing cases from the messages of the very run they are injected into)."""

    def __init__(self, injections: Sequence[Injection] = ()) -> None:
        super().__init__(injections)
        self.forwarded: dict[str, list[tuple[int, Role, bytes]]] = {}
        self.responses: dict[str, dict[int, bytes]] = {}

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        self.forwarded[phase] = list(items)
        return super().on_forward(phase, items)

    def on_response(self, phase: str, pairs: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        self.responses[phase] = dict(pairs)
        return super().on_response(phase, pairs)


def tapped(inputs: dict[str, Any], injections: Sequence[Injection] = ()) -> Tap:
    tap = Tap(injections)
    x, spec = protocol_round(inputs)
    run_protocol(x, spec, adversary=tap)
    return tap


def failing_cases(inputs: dict[str, Any], pop: Population, honest: Observed) -> list[dict[str, Any]]:
    """Messages the parties must refuse, built from the protocol's own messages, each with the
    party that refuses it and the typed status it must get (checked against the run)."""
    _, spec = protocol_round(inputs)
    channel = build_components(spec.components).channel
    rng = RandomSource.seeded(int(inputs["seed"]), "protocol-vector/injections")
    keys = {role: box_key(spec.seeds, channel, role)[1] for role in (Role.S_TAG, Role.S_SYN)}
    user = Role.USER.label

    def sealed(role: Role, plaintext: bytes) -> bytes:
        (prepared,) = channel.prepare_seals(keys[role], 1, rng)
        ciphertext = channel.seal_prepared(prepared, plaintext)
        return SealedEnvelope(recipient=role, ciphertext=ciphertext).encode()

    def injections(rows: Sequence[tuple[Any, ...]]) -> list[Injection]:
        return [Injection(hook=r[1], phase=r[2], connection=r[3], sender=user, data=r[4]) for r in rows]

    # The victim of the tampered proof is a rare user: its bucket is never released, so the
    # release under attack is the honest one.
    rare = int(np.flatnonzero(pop.labels == -1)[0])
    genuine = decode_as(tapped(inputs).responses[PHASE1][rare], Evaluation)
    tampered = Evaluation(
        evaluated_element=genuine.evaluated_element, proof=bytes([genuine.proof[0] ^ 1]) + genuine.proof[1:]
    ).encode()
    identity = BlindRequest(blinded_element=bytes(32)).encode()
    non_canonical = BlindRequest(blinded_element=b"\xff" * 32).encode()
    request = sealed(Role.S_TAG, identity)
    # (name, hook, phase, connection, input, refusing party, status, payload it records)
    plan: list[tuple[Any, ...]] = [
        ("identity blinded element", FORWARD, PHASE1, INJECTED + 1, request,
         "S_tag", "rejected:DecodeError", identity),
        ("non-canonical blinded element", FORWARD, PHASE1, INJECTED + 2, sealed(Role.S_TAG, non_canonical),
         "S_tag", "rejected:DecodeError", non_canonical),
        ("truncated envelope", FORWARD, PHASE1, INJECTED + 3, request[:-10],
         "proxy", "rejected:DecodeError", request[:-10]),
        ("tampered evaluation proof", RESPONSE, PHASE1, rare, tampered,
         "user", "rejected:VerificationError", tampered),
    ]
    # The one to replay is a submission of the run under the phase-1 cases (the victim sends
    # none). Each user's submission is its own draws alone, so it is in the honest run too: a
    # driver that cannot deliver the phase-1 cases (one over HTTP) still replays a real message.
    submitted = tapped(inputs, injections(plan)).forwarded[PHASE1_SUBMIT]
    replayed = submitted[0][2]
    if not any(o.payload == replayed.hex() for o in honest.operations if o.view == "proxy"):
        raise RuntimeError("the replayed submission is not in the honest run: a user's draws depend on others")
    share = next(
        decode_as(bytes.fromhex(o.payload), ShareSubmission)
        for o in honest.operations
        if o.view == "S_syn" and o.message_type == "share_submission" and o.payload is not None
    )
    unreleased = ShareSubmission(
        tag=b"\x42" * 32, contribution_id=b"\x01" * 16, token=b"\x02" * 32, share=bytes(len(share.share))
    ).encode()
    # A share for a released tag whose token no phase-1 submission committed to (design §6.8).
    tokenless = ShareSubmission(
        tag=share.tag, contribution_id=b"\x03" * 16, token=b"\x04" * 32, share=bytes(len(share.share))
    ).encode()
    plan += [
        ("replayed tag submission", FORWARD, PHASE1_SUBMIT, INJECTED + 4, replayed,
         "S_syn", "rejected:ProtocolStateError", None),
        ("share for an unreleased tag at S_syn", FORWARD, PHASE2, INJECTED + 5, sealed(Role.S_SYN, unreleased),
         "S_syn", "rejected:ProtocolStateError", unreleased),
        ("share for an unreleased tag at S_tag", FORWARD, PHASE2, INJECTED + 6, sealed(Role.S_TAG, unreleased),
         "S_tag", "rejected:ProtocolStateError", unreleased),
        ("share without a phase-1 token at S_syn", FORWARD, PHASE2, INJECTED + 7, sealed(Role.S_SYN, tokenless),
         "S_syn", "rejected:VerificationError", tokenless),
        ("share without a phase-1 token at S_tag", FORWARD, PHASE2, INJECTED + 8, sealed(Role.S_TAG, tokenless),
         "S_tag", "rejected:VerificationError", tokenless),
    ]
    attacked = run_in_process(inputs, injections(plan))
    rejected = [(seq, o) for seq, o in enumerate(attacked.operations) if o.status != "accepted"]
    if len(rejected) != len(plan):
        raise RuntimeError(f"expected {len(plan)} rejections, the run recorded {[o.where() for _, o in rejected]}")
    cases = []
    for name, hook, phase, conn, data, party, status, payload in plan:
        matches = [
            (seq, o) for seq, o in rejected
            if o.view == party and o.phase == phase and (payload is None or o.payload == payload.hex())
        ]
        if len(matches) != 1 or matches[0][1].status != status:
            raise RuntimeError(f"failing case {name!r}: expected one {status} in {party}'s view, got {matches}")
        seq, op = matches[0]
        cases.append({
            "name": name, "hook": hook, "phase": phase, "connection": conn, "sender": user,
            "input": data.hex(), "party": party, "status": status, "seq": seq, "recorded": op.to_dict(),
        })
    if attacked.release != honest.release:
        raise RuntimeError("the failing cases changed the release: choose victims outside released buckets")
    return cases


def vector(description: str, inputs: dict[str, Any], pop: Population, *, with_failing: bool) -> dict[str, Any]:
    honest = run_in_process(inputs)
    again = run_in_process(inputs)
    # Two seeded runs must agree entry by entry, or the vector would not replay.
    compare_operations(honest.operations, again.operations, ordering="sequence")
    compare_release(honest.release, again.release, what="the second run's release")
    released = len(honest.release["buckets"])
    if not 2 <= released <= 3:
        raise RuntimeError(f"the vector should release 2-3 buckets, this run released {released}")
    out: dict[str, Any] = {
        "format": FORMAT,
        "description": description,
        "inputs": inputs,
        "operations": [o.to_dict() for o in honest.operations],
        "release": honest.release,
    }
    if with_failing:
        out["failing"] = {"cases": failing_cases(inputs, pop, honest), "release": honest.release}
    return out


def main() -> None:
    noiseless_pop = population((15, 15, 15), 5, 7)
    noisy_pop = population((20, 20), 4, 7)
    files = {
        "noiseless.json": vector(
            "eps = inf, noise off: 50 users in d = 8 (three clusters of 15, five rare points), "
            "threshold 10; three buckets released. Failing cases: nine messages injected at the "
            "proxy that a party must refuse.",
            inputs_for(noiseless_pop, FreParams(epsilon=math.inf, p_sample=1.0, threshold=10), seed=1, noise=False),
            noiseless_pop, with_failing=True,
        ),
        "dp_noise.json": vector(
            "eps = 16, delta = 0.01, p_s = 0.5, threshold 20 (tau = 10), DDG noise on, TSDLap "
            "dummy tags: 44 users in d = 8 (two clusters of 20, four rare points); two buckets released.",
            inputs_for(
                noisy_pop, FreParams(epsilon=16.0, delta=0.01, p_sample=0.5, threshold=20), seed=5, noise=True
            ),
            noisy_pop, with_failing=False,
        ),
    }
    for name, data in files.items():
        write_vector(VECTOR_DIR / name, data)


if __name__ == "__main__":
    main()
