"""A malicious user against the centroids: the norm guard, and the validator plug point.

Shares are uniform, so no server can check that a share pair encodes a clipped vector: one user
who offsets its share moves its bucket's sum at will. S_syn withholds a decoded sum longer than
honest inputs, rounding and noise can make it (post-processing of the DP sum); per-contribution
validity checks plug in as a :class:`ContributionValidator`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fre_protocol.components import build_components
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.messages import Role, SealedEnvelope, ShareSubmission, decode
from fre_protocol.roles.base import PHASE2
from fre_protocol.roles.config import RoundSpec, RunOptions
from fre_protocol.roles.proxy import NetworkAdversary
from fre_protocol.roles.round import box_key
from fre_protocol.roles.synthesis_server import NORM_GUARD
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.seeds import SeedPlan
from primitives.ddg import DDGConfig, DDGEncoder
from primitives.randomness import RandomSource

SEEDS = SeedPlan.from_seed(41)
PARAMS = FreParams.paper(8.0)


@pytest.fixture(scope="module")
def pop() -> Population:
    return synthetic_population(1, 160, 20, 16, 0.5, RandomSource.seeded(41, "guard"), spread=0.01)


class OffsetShare(NetworkAdversary):
    """One participant's share to S_syn with the top bit of each of its first three bytes
    flipped: about half the ring added to one coordinate of its encoding (24-bit words), which
    neither server can see."""

    def __init__(self) -> None:
        self.channel = build_components().channel
        self.key = box_key(SEEDS, self.channel, Role.S_SYN)
        self.victim: int | None = None

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        if phase != PHASE2:
            return items
        out = []
        for conn, role, data in items:
            env = decode(data)
            assert isinstance(env, SealedEnvelope)
            if self.victim is None and env.recipient is Role.S_SYN:
                msg = decode(self.channel.open(self.key[0], env.ciphertext))
                if isinstance(msg, ShareSubmission):
                    self.victim = conn
                    share = bytes(b ^ 0x80 for b in msg.share[:3]) + msg.share[3:]
                    bad = ShareSubmission(tag=msg.tag, contribution_id=msg.contribution_id, token=msg.token, share=share)
                    data = SealedEnvelope(
                        recipient=Role.S_SYN, ciphertext=self.channel.seal(self.key[1], bad.encode())
                    ).encode()
            out.append((conn, role, data))
        return out


def test_an_offset_share_is_withheld_by_the_norm_guard(pop: Population, tmp_path: Path) -> None:
    honest = run_protocol(pop.embeddings, RoundSpec(params=PARAMS, seeds=SEEDS), RunOptions(out_dir=tmp_path / "honest")).release
    assert len(honest) == 1 and honest.info["withheld"] == {}
    # the honest decoded sum (near-parallel unit vectors: about as long as n) is inside the bound
    encoder = DDGEncoder(DDGConfig.from_dict(honest.info["ddg"]))
    count = honest.diagnostics["contributors"][honest.ids[0]]
    assert np.linalg.norm(honest.centroids[0] * count) < encoder.sum_norm_bound(count, count)
    adversary = OffsetShare()
    attacked = run_protocol(pop.embeddings, RoundSpec(params=PARAMS, seeds=SEEDS), RunOptions(out_dir=tmp_path / "attacked"), adversary=adversary)
    assert adversary.victim is not None
    release = attacked.release
    assert len(release) == 0 and list(release.info["withheld"].values()) == [NORM_GUARD]
    assert release.ledger.term("dropouts").detail["tags"][honest.ids[0]]["why"] == NORM_GUARD


def test_sum_norm_bound_is_what_its_docstring_says() -> None:
    encoder = DDGEncoder(DDGConfig(dim=16, padded_dim=16, gamma=0.01, sigma_int=50.0, modulus_bits=24, clip=1.0))
    bound = encoder.sum_norm_bound(30, 50)
    assert bound == pytest.approx(30 * 1.0 + encoder.quantization_bound(30) + 0.01 * 50 * np.sqrt(50) * (4 + 8))
    with pytest.raises(ValueError, match="noise_users"):
        encoder.sum_norm_bound(30, -1)


class DropFirst:
    """A validator that rejects the smallest contribution id of every tag."""

    def __init__(self) -> None:
        self.rejected: list[bytes] = []

    def valid(self, tag: bytes, contribution_ids: tuple[bytes, ...]) -> tuple[bytes, ...]:
        self.rejected.append(contribution_ids[0])
        return contribution_ids[1:]


def test_a_validator_decides_which_contributions_both_servers_sum(pop: Population) -> None:
    inf = FreParams.paper(float("inf"))
    plain = run_protocol(pop.embeddings, RoundSpec(params=inf, seeds=SEEDS, noise=False)).release
    validator = DropFirst()
    checked = run_protocol(pop.embeddings, RoundSpec(params=inf, seeds=SEEDS, noise=False), validator=validator).release
    (tag,) = checked.ids
    assert len(validator.rejected) == 1
    assert checked.diagnostics["contributors"][tag] == plain.diagnostics["contributors"][tag] - 1
    # the sum lost exactly one clipped input (noise off, so only rounding differs)
    n = plain.diagnostics["contributors"][tag]
    removed = plain.centroids[0] * n - checked.centroids[0] * (n - 1)
    encoder = DDGEncoder(DDGConfig.from_dict(checked.info["ddg"]))
    assert np.linalg.norm(removed) <= 1.0 + 2 * encoder.quantization_bound(n)
    assert np.min(np.linalg.norm(pop.embeddings - removed, axis=1)) <= 2 * encoder.quantization_bound(n) + 1e-9
