"""One-time contribution tokens (design §6.8) and the calibration for dishonest contributors
(design §4.4): a phase-2 share counts only when it carries the token of an accepted phase-1
submission of its tag, once; and the users' DDG noise can be sized for a fraction f of the
release floor's contributors being dishonest (adding no noise at all).

The Sybil attack of the security review: a released tag whose honest contributors are fewer
than ⌈τ⌉ must stay withheld however many noise-free shares parties without phase-1
submissions add.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fre_protocol.components import build_components
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.drivers.local import ProtocolResult
from fre_protocol.messages import (
    TOKEN_BYTES,
    CoverShare,
    Role,
    SealedEnvelope,
    ShareSubmission,
    decode,
)
from fre_protocol.roles.base import PHASE2
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, RunOptions
from fre_protocol.roles.ledger import build_ledger, ddg_config_for, dummy_parameters
from fre_protocol.roles.proxy import NetworkAdversary
from fre_protocol.roles.round import box_key
from fre_protocol.roles.synthesis_server import BELOW_FLOOR
from mechanism.fre_e2t import release_threshold
from mechanism.grid import PublicGrid
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.seeds import SeedPlan
from primitives.ddg import ddg_accounting
from primitives.ddg.accounting import clipped_sensitivity
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource
from transcripts import TranscriptStore

INF = FreParams.paper(math.inf)
EPS8 = FreParams.paper(8.0)
SEEDS = SeedPlan.from_seed(1)  # the robustness tests' plan seed: each planted cluster in a bucket of its own
CONFIG = ProtocolConfig(modulus_bits=22)


@pytest.fixture(scope="module")
def pop() -> Population:
    return synthetic_population(2, 130, 40, 16, 0.5, RandomSource.seeded(23, "robust"), spread=0.005)


@pytest.fixture(scope="module")
def lone() -> Population:
    """One bucket of 140 users: at ε = 8 (τ = 50) it is released with about 70 sampled users."""
    return synthetic_population(1, 140, 20, 16, 0.5, RandomSource.seeded(5, "topup"), spread=0.01)


class Keys:
    """The servers' sealing keys, recomputed from the seed plan (test mode) to forge messages."""

    def __init__(self) -> None:
        self.channel = build_components().channel
        self.tag = box_key(SEEDS, self.channel, Role.S_TAG)
        self.syn = box_key(SEEDS, self.channel, Role.S_SYN)

    def seal(self, role: Role, plain: bytes) -> bytes:
        key = self.tag[1] if role is Role.S_TAG else self.syn[1]
        return SealedEnvelope(recipient=role, ciphertext=self.channel.seal(key, plain)).encode()

    def open(self, envelope: bytes) -> tuple[Role, bytes]:
        env = decode(envelope)
        assert isinstance(env, SealedEnvelope)
        key = self.tag[0] if env.recipient is Role.S_TAG else self.syn[0]
        return env.recipient, self.channel.open(key, env.ciphertext)


def _genuine(keys: Keys, items: list[tuple[int, Role, bytes]]) -> dict[int, dict[Role, ShareSubmission]]:
    """The users' real phase-2 shares, by connection and recipient."""
    out: dict[int, dict[Role, ShareSubmission]] = {}
    for conn, _, env in items:
        recipient, plain = keys.open(env)
        msg = decode(plain)
        if isinstance(msg, ShareSubmission):
            out.setdefault(conn, {})[recipient] = msg
    return out


class Sybils(NetworkAdversary):
    """``count`` fake contributors: each a valid sharing of the zero vector (no noise at all)
    for the released tag, under a fresh contribution id and a token that no phase-1 submission
    committed to."""

    def __init__(self, keys: Keys, count: int, modulus_bits: int) -> None:
        self.keys, self.count, self.modulus_bits = keys, count, modulus_bits

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        if phase != PHASE2:
            return items
        pairs = _genuine(self.keys, items)
        tag = next(iter(pairs.values()))[Role.S_SYN].tag
        sharing = build_components().make_sharing(self.modulus_bits)
        width = 16  # the padded dimension of these 16-d embeddings
        rng = RandomSource.seeded(99, "sybils")
        first, second = sharing.share(np.zeros((self.count, width), dtype=np.uint64), rng)
        extra = []
        for j in range(self.count):
            cid, token = rng.random_bytes(16), rng.random_bytes(TOKEN_BYTES)
            for k, (role, batch) in enumerate(((Role.S_TAG, first), (Role.S_SYN, second))):
                fake = ShareSubmission(tag=tag, contribution_id=cid, token=token, share=sharing.encode_share(batch, j))
                extra.append((9200 + 2 * j + k, Role.USER, self.keys.seal(role, fake.encode())))
        return items + extra


def _run(pop: Population, tmp_path: Path, adversary: NetworkAdversary | None = None, **kw: Any) -> ProtocolResult:
    spec = RoundSpec(**{"params": INF, "seeds": SEEDS, "noise": False, "config": CONFIG, **kw})
    return run_protocol(pop.embeddings, spec, RunOptions(out_dir=tmp_path), adversary=adversary)


def _share_statuses(result: ProtocolResult, view: str) -> Counter[str]:
    with TranscriptStore.open(result.transcript_path) as store:  # type: ignore[arg-type]
        return Counter(e.status for e in store.entries(view=view, phase=PHASE2, message_type="share_submission"))


def _keep(pop: Population, keep: int) -> Any:
    """Dropout of all but ``keep`` sampled members of the one bucket (they stay online)."""
    grid = PublicGrid.derive(SEEDS, pop.dim, INF)
    rows = grid.bucket_indices(pop.embeddings).tolist()
    members = [u for u, row in enumerate(rows) if tuple(row) == tuple(rows[0])]

    def dropout(n: int) -> np.ndarray:
        return np.isin(np.arange(n), members[keep:])

    return dropout


def test_sybil_shares_without_phase1_tokens_cannot_lift_a_tag_over_the_floor(lone: Population, tmp_path: Path) -> None:
    """ε = 8, ⌈τ⌉ = 50: the bucket is released, then all but a few of its members drop out, so
    fewer than 50 honest contributions remain. 60 noise-free fake contributions (tokens that no
    phase-1 submission committed to) would make the count reach the floor while the sum carries
    only the few honest users' noise. Both servers refuse every fake; the tag is withheld."""
    result = _run(lone, tmp_path, Sybils(Keys(), 60, CONFIG.modulus_bits), params=EPS8, noise=True, dropout=_keep(lone, 40),
                  config=dataclasses.replace(CONFIG, dropout_policy="withhold"))
    release = result.release
    assert release.info["n_released_tags"] == 1
    assert len(release) == 0
    assert list(release.info["withheld"].values()) == [BELOW_FLOOR]
    for view in ("S_syn", "S_tag"):
        statuses = _share_statuses(result, view)
        assert statuses["rejected:VerificationError"] == 60, (view, statuses)
        assert statuses["accepted"] < release_threshold(EPS8)


class Replay(NetworkAdversary):
    """Takes one participant's two shares and sends them again with the same token under a new
    contribution id (``tag``: under another released tag instead of its own)."""

    def __init__(self, keys: Keys, *, other_tag: bool) -> None:
        self.keys, self.other_tag = keys, other_tag
        self.victim_tag: bytes | None = None

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        if phase != PHASE2:
            return items
        pairs = _genuine(self.keys, items)
        tags = sorted({m[Role.S_SYN].tag for m in pairs.values()})
        victim = next(iter(pairs.values()))
        self.victim_tag = victim[Role.S_SYN].tag
        tag = next(t for t in tags if t != self.victim_tag) if self.other_tag else self.victim_tag
        extra = []
        for k, role in enumerate((Role.S_TAG, Role.S_SYN)):
            copy = ShareSubmission(
                tag=tag, contribution_id=b"\x77" * 16, token=victim[role].token, share=victim[role].share
            )
            extra.append((9300 + k, Role.USER, self.keys.seal(role, copy.encode())))
        return items + extra


def test_a_replayed_token_is_refused_the_second_time(pop: Population, tmp_path: Path) -> None:
    """The same token in a second contribution of the same tag: whichever copy arrives second
    is refused by each server (typed, recorded); the token counts once."""
    honest = _run(pop, tmp_path / "honest")
    result = _run(pop, tmp_path / "replay", Replay(Keys(), other_tag=False))
    for view in ("S_syn", "S_tag"):
        statuses = _share_statuses(result, view)
        assert statuses["rejected:ProtocolStateError"] == 1, (view, statuses)
        assert statuses["accepted"] == _share_statuses(honest, view)["accepted"]
    assert result.release.ids == honest.release.ids
    assert np.array_equal(result.release.counts, honest.release.counts)


def test_a_token_of_one_tag_is_refused_for_another(pop: Population, tmp_path: Path) -> None:
    """A token committed for tag h, used for the other released tag h': refused by both servers;
    the genuine contribution still counts and the release is the honest one."""
    honest = _run(pop, tmp_path / "honest").release
    result = _run(pop, tmp_path / "cross", Replay(Keys(), other_tag=True))
    for view in ("S_syn", "S_tag"):
        statuses = _share_statuses(result, view)
        assert statuses["rejected:VerificationError"] == 1, (view, statuses)
    assert result.release.ids == honest.ids
    assert np.array_equal(result.release.counts, honest.counts)
    assert np.array_equal(result.release.centroids, honest.centroids)


def test_cover_shares_carry_a_token_field_and_match_real_shares_in_size() -> None:
    share = bytes(300)
    real = ShareSubmission(tag=b"t" * 32, contribution_id=b"c" * 16, token=b"k" * TOKEN_BYTES, share=share)
    cover = CoverShare.matching(len(share), token=b"r" * TOKEN_BYTES)
    assert len(cover.encode()) == len(real.encode())
    assert cover.token == b"r" * TOKEN_BYTES


# -- calibration for dishonest contributors ---------------------------------------------------------
def _sigma(f: float, params: FreParams = EPS8, dim: int = 384) -> float:
    cfg = ProtocolConfig(dishonest_fraction=f)
    ddg = ddg_config_for(params, dim, cfg, n_modulus=release_threshold(params))
    return float(ddg.gamma * ddg.sigma_int)


def test_dishonest_fraction_raises_the_users_sigma_monotonically() -> None:
    """Per user, in embedding units (γ·σ_int): γ moves with σ to keep the modulus filled."""
    sigmas = [_sigma(f) for f in (0.0, 0.1, 0.25, 0.5)]
    assert all(a < b for a, b in zip(sigmas, sigmas[1:], strict=False)), sigmas


@pytest.mark.parametrize("f", [0.1, 0.25])
def test_the_accountant_at_the_honest_count_meets_the_target(f: float) -> None:
    """σ_int is calibrated so that ⌊(1 − f)·⌈τ⌉⌋ honest users' noise alone gives the DDG term's
    ε (to the bisection's tolerance), and the ledger states f, the honest count and σ at f = 0."""
    from fre_protocol.roles.ledger import aggregation_budget

    params, cfg = EPS8, ProtocolConfig(dishonest_fraction=f)
    floor = release_threshold(params)
    honest = max(1, math.floor((1 - f) * floor))
    ddg = ddg_config_for(params, 384, cfg, n_modulus=floor)
    eps_agg, delta_agg = aggregation_budget(params, dummy_parameters(params, cfg))
    acc = ddg_accounting(
        sigma_int=ddg.sigma_int, gamma=ddg.gamma, sensitivity=clipped_sensitivity(params.sensitivity, ddg.clip),
        dim_padded=ddg.padded_dim, n=honest, delta=delta_agg, beta=ddg.beta,
    )
    assert acc.epsilon <= eps_agg * (1 + 1e-9)
    assert acc.epsilon >= eps_agg * (1 - 1e-3)
    ledger = build_ledger(params, ddg, dummy_parameters(params, cfg), dishonest_fraction=f)
    term = ledger.term("dishonest_contributors")
    assert term.epsilon == 0.0 and term.delta == 0.0
    assert term.detail["dishonest_fraction"] == f
    assert term.detail["n_honest"] == honest
    assert term.detail["release_floor"] == floor
    assert term.detail["sigma_int"] == pytest.approx(ddg.sigma_int)
    zero = ddg_config_for(params, 384, ProtocolConfig(), n_modulus=floor)
    assert term.detail["sigma_user_at_f0"] == pytest.approx(zero.gamma * zero.sigma_int, rel=1e-3)
    assert term.detail["sigma_user"] > term.detail["sigma_user_at_f0"]
    assert ledger.term("centroid_ddg").detail["n"] == honest


def test_f_zero_leaves_the_ledger_as_it_was() -> None:
    """At f = 0 every number is what it was before the parameter existed (pinned: σ_int and the
    whole ledger's canonical JSON at ε = 8, d = 384, under the RDP accountant of the time; the
    JSON was re-pinned when the DDG term's detail gained the accountant's name, bound and
    smoothing variance, with σ_int unchanged)."""
    params, cfg = EPS8, ProtocolConfig(ddg_accountant="rdp")
    assert cfg.dishonest_fraction == 0.0
    ddg = ddg_config_for(params, 384, cfg, n_modulus=release_threshold(params))
    assert ddg.sigma_int == 70716.94816537389
    ledger = build_ledger(params, ddg, dummy_parameters(params, cfg))
    text = json.dumps(ledger.to_dict(), sort_keys=True, default=str)
    assert hashlib.sha256(text.encode()).hexdigest() == "09f6bf1baea8ae3607f65b2f29be947bc8cdec188f8c5f2f230428f96c9a25ed"
    with pytest.raises(KeyError):
        ledger.term("dishonest_contributors")


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, math.nan, "0.1", True])
def test_dishonest_fraction_out_of_range_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidParameterError, match=r"dishonest_fraction must be a number in \[0, 1\)"):
        ProtocolConfig(dishonest_fraction=bad)


# -- the servers' token bookkeeping, one party at a time ------------------------------------------
def _syn_with_released(comps: Any, tags: dict[bytes, int]) -> tuple[Any, Any, list[bytes]]:
    """S_syn after phase 1 (floor 3) with ``tags`` submitted, and the tokens the users drew."""
    from fre_protocol.messages import TagSubmission, token_hash
    from fre_protocol.roles import Meter, Recorder, SynthesisServer, Workers

    box = comps.channel.generate_keypair(rng=RandomSource.seeded(1, "syn"))
    server = SynthesisServer(
        box_key=box, channel=comps.channel, workers=Workers(1), meter=Meter(), recorder=Recorder(), release_floor=3,
    )
    rng = RandomSource.seeded(3, "tokens")
    tokens, plains = [], []
    for tag, count in tags.items():
        for _ in range(count):
            token = rng.random_bytes(TOKEN_BYTES)
            tokens.append(token)
            plains.append(TagSubmission(tag=tag, token_hash=token_hash(token)).encode())
    # the last token hash again, under the other tag: refused, not counted (one token, one count)
    again = TagSubmission(tag=list(tags)[0], token_hash=token_hash(tokens[-1])).encode()
    server.receive_submissions(comps.channel.seal_many(box[1], plains + [again]))
    return server, box, tokens


def test_s_syn_counts_one_submission_per_token_hash_and_hands_s_tag_the_released_sets() -> None:
    from fre_protocol.messages import ReleasedTags, ReleasedTokens, decode_as, token_hash

    comps = build_components(workers=1)
    a, b = b"a" * 32, b"b" * 32
    server, _, tokens = _syn_with_released(comps, {a: 3, b: 3})
    assert server.rejections == {"rejected:ProtocolStateError": 1}
    broadcast = decode_as(server.release(), ReleasedTags)
    assert broadcast.counts == (3, 3)
    sets = [decode_as(m, ReleasedTokens) for m in server.released_tokens()]
    assert [s.tag for s in sets] == [a, b]
    assert sets[0].token_hashes == tuple(sorted(token_hash(t) for t in tokens[:3]))
    assert sets[1].token_hashes == tuple(sorted(token_hash(t) for t in tokens[3:]))


def test_s_tag_refuses_token_sets_it_cannot_use(tmp_path: Path) -> None:
    """A set for a tag that was not released, a second set for a tag, a set whose length is not
    the released count: each refused (typed, recorded in S_tag's view)."""
    from fre_protocol.messages import ReleasedTags, ReleasedTokens
    from fre_protocol.roles import Meter, Recorder, TaggingServer, Workers
    from fre_protocol.roles.round import tagging_key
    from transcripts import TranscriptHeader, TranscriptStore

    comps = build_components(workers=1)
    a, b = b"a" * 32, b"b" * 32
    with TranscriptStore.create(tmp_path / "t.sqlite", TranscriptHeader(rng_mode="seeded")) as store:
        server = TaggingServer(
            suite=comps.suite, voprf_key=tagging_key(SEEDS, comps.suite),
            box_key=comps.channel.generate_keypair(rng=RandomSource.seeded(1, "tag")), channel=comps.channel,
            rng=RandomSource.seeded(2), workers=Workers(1), meter=Meter(), recorder=Recorder(store, flush_every=1),
            release_floor=2,
        )
        server.receive_broadcast(ReleasedTags(tags=(a,), counts=(2,)).encode())
        good = ReleasedTokens(tag=a, token_hashes=(b"\x01" * 32, b"\x02" * 32)).encode()
        server.receive_tokens([
            ReleasedTokens(tag=b, token_hashes=(b"\x01" * 32, b"\x02" * 32)).encode(),  # not released
            ReleasedTokens(tag=a, token_hashes=(b"\x01" * 32,)).encode(),  # one hash for a count of 2
            good,
            good,  # a second set for the tag
        ])
        statuses = [e.status for e in store.entries(view="S_tag", message_type="released_tokens")]
    assert statuses == ["rejected:ProtocolStateError"] * 2 + ["accepted", "rejected:ProtocolStateError"]
