"""Every role is a state machine declared once as data (:mod:`fre_protocol.roles.state`).

(a) The legitimate orders every driver uses reach the declared states: the in-process round,
    servers keeping running sums that settle after each window, and phase 2 on devices restored
    from their phase-1 outcome (a streaming window hears the broadcast after preparing, a Dask
    task before).
(b) Each message, in every state its role's table does not take it in, is refused with
    :class:`OutOfOrderError` naming the role, the state, the message and what was expected;
    parametrised over the tables, so a new transition is covered as soon as it is declared.
(c) A refused message changes nothing: same state, nothing recorded or metered, no attribute
    touched. Checked both in forced states and in every state the legitimate orders reach.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import pytest

from fre_protocol.components import build_components
from fre_protocol.messages import CompactBroadcast, ReleasedTags, Role
from fre_protocol.roles.base import (
    BROADCAST,
    PHASE1,
    PHASE1_SUBMIT,
    PHASE2,
    Meter,
    Recorder,
    Workers,
)
from fre_protocol.roles.broadcast import HeardBroadcast
from fre_protocol.roles.config import ProtocolConfig
from fre_protocol.roles.dummy_user import DUMMY_TRANSITIONS, DummyState, DummyUser
from fre_protocol.roles.proxy import PROXY_TRANSITIONS, AnonymizingProxy, Delivery, ProxyState
from fre_protocol.roles.round import phase2_plan
from fre_protocol.roles.state import OutOfOrderError, Transitions
from fre_protocol.roles.synthesis_server import (
    SYNTHESIS_TRANSITIONS,
    SynthesisServer,
    SynthesisState,
)
from fre_protocol.roles.tagging_server import TAGGING_TRANSITIONS, TaggingServer, TaggingState
from fre_protocol.roles.user import (
    PHASE1_SEALS,
    PHASE2_SEALS,
    USER_TRANSITIONS,
    ServerKeys,
    UserPopulation,
    UserState,
    share_plaintexts,
)
from mechanism.params import FreParams
from primitives.compact.ribbon import RibbonBroadcast
from primitives.errors import ProtocolStateError
from primitives.randomness import RandomSource
from primitives.secret import Secret

N, DIM, CHUNK, FLOOR = 12, 4, 4, 2
INF = FreParams.paper(math.inf)
CONFIG = ProtocolConfig(modulus_bits=22, chunk_size=CHUNK)
EMPTY_BROADCAST = ReleasedTags(tags=(), counts=()).encode()
#: What users hear: the compact broadcast of nothing (the default encoding).
EMPTY_USER_BROADCAST = CompactBroadcast(encoding="ribbon", max_count=0, body=RibbonBroadcast().build({}, b"")).encode()


@dataclass(frozen=True)
class Kit:
    comps: Any
    voprf: tuple[Secret[bytes], bytes]
    tag_box: tuple[Secret[bytes], bytes]
    syn_box: tuple[Secret[bytes], bytes]

    @property
    def keys(self) -> ServerKeys:
        return ServerKeys(voprf_public_key=self.voprf[1], tag_box_key=self.tag_box[1], syn_box_key=self.syn_box[1])


@pytest.fixture(scope="module")
def kit() -> Kit:
    comps = build_components(workers=1)
    sk, pk = comps.suite.derive_key_pair(b"k" * 32, b"states")
    return Kit(
        comps=comps, voprf=(Secret(sk), pk),
        tag_box=comps.channel.generate_keypair(RandomSource.seeded(1, "tag")),
        syn_box=comps.channel.generate_keypair(RandomSource.seeded(1, "syn")),
    )


# -- the roles, built as the drivers build them -----------------------------------------------------
def _users(
    kit: Kit, meter: Meter, recorder: Recorder, span: range = range(N), *, coins: np.ndarray | None = None
) -> UserPopulation:
    """Users ``span`` of the round's N (a window starts on a chunk boundary): two buckets, and a
    coin for two users in three."""
    everyone = np.arange(N)
    return UserPopulation(
        np.linspace(-0.2, 0.2, N * DIM).reshape(N, DIM)[span.start : span.stop],
        [b"bucket-%d" % (i % 2) for i in span],
        (coins if coins is not None else everyone % 3 != 0)[span.start : span.stop],
        suite=kit.comps.suite, keys=kit.keys, channel=kit.comps.channel, rng=RandomSource.seeded(3, "users"),
        workers=Workers(1), meter=meter, recorder=recorder, chunk_size=CHUNK, first_chunk=span.start // CHUNK,
    )


def _s_tag(kit: Kit, meter: Meter, recorder: Recorder, *, keep: bool = True) -> TaggingServer:
    return TaggingServer(
        suite=kit.comps.suite, voprf_key=kit.voprf, box_key=kit.tag_box, channel=kit.comps.channel,
        rng=RandomSource.seeded(2, "S_tag"), workers=Workers(1), meter=meter, recorder=recorder,
        release_floor=FLOOR, keep_contributions=keep,
    )


def _s_syn(kit: Kit, meter: Meter, recorder: Recorder, *, keep: bool = True) -> SynthesisServer:
    return SynthesisServer(
        box_key=kit.syn_box, channel=kit.comps.channel, workers=Workers(1), meter=meter, recorder=recorder,
        release_floor=FLOOR, keep_contributions=keep,
    )


def _proxy(kit: Kit, meter: Meter, recorder: Recorder) -> AnonymizingProxy:
    return AnonymizingProxy(shuffler=kit.comps.shuffler, rng=RandomSource.seeded(4, "proxy"), recorder=recorder, meter=meter)


def _dummy(kit: Kit, meter: Meter, recorder: Recorder) -> DummyUser:
    return DummyUser(
        generator=kit.comps.make_dummy_generator(1.0, 1e-6), channel=kit.comps.channel, syn_box_key=kit.syn_box[1],
        rng=RandomSource.seeded(4, "dummy"), workers=Workers(1), meter=meter,
    )


# -- each message with arguments of the right kind (refused before they are looked at) -------------
def _proxy_call(message: str) -> Callable[[AnonymizingProxy], Any]:
    method, phase = message.split(":")
    if method == "forward":
        return lambda p: p.forward(phase, [])
    if method == "route_back":
        return lambda p: p.route_back(phase, Delivery(0, Role.S_TAG, []), [])
    assert method == "broadcast", message
    return lambda p: p.broadcast(phase, Role.S_SYN, EMPTY_BROADCAST)


CALLS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "users": {
        "prepare": lambda u: u.prepare(),
        "blind_requests": lambda u: u.blind_requests(),
        "receive_evaluations": lambda u: u.receive_evaluations([]),
        "tag_submissions": lambda u: u.tag_submissions(),
        "receive_broadcast": lambda u: u.receive_broadcast(EMPTY_USER_BROADCAST),
        "restore": lambda u: u.restore([None] * u.n, np.zeros(u.n, dtype=bool), None, tokens=[None] * u.n),
        "share_submissions": lambda u: u.share_submissions(encoder=None, sharing=None, noise=False),
        "sealed_shares": lambda u: u.sealed_shares([], []),
        "cover_messages": lambda u: u.cover_messages(np.zeros(0, dtype=np.int64), (8, 8)),
    },
    "S_tag": {
        "evaluate": lambda s: s.evaluate([]),
        "receive_broadcast": lambda s: s.receive_broadcast(EMPTY_BROADCAST),
        "receive_tokens": lambda s: s.receive_tokens([]),
        "receive_shares": lambda s: s.receive_shares([], sharing=None, dim=DIM),
        "settle_contributions": lambda s: s.settle_contributions([], sharing=None, dim=DIM),
        "aggregate": lambda s: s.aggregate([], sharing=None),
    },
    "S_syn": {
        "receive_submissions": lambda s: s.receive_submissions([]),
        "release": lambda s: s.release(),
        "released_tokens": lambda s: s.released_tokens(),
        "user_broadcast": lambda s: s.user_broadcast(),
        "receive_shares": lambda s: s.receive_shares([], sharing=None, dim=DIM),
        "pending_contributions": lambda s: s.pending_contributions(),
        "settle_contributions": lambda s: s.settle_contributions([], sharing=None, dim=DIM),
        "accepted_contributions": lambda s: s.accepted_contributions(),
        "reconstruct": lambda s: s.reconstruct([], sharing=None, encoder=None),
    },
    "proxy": {message: _proxy_call(message) for message in PROXY_TRANSITIONS.table},
    "dummy_user": {"submissions": lambda d: d.submissions(6.5)},
}


@dataclass(frozen=True)
class RoleKind:
    name: str
    cls: type
    transitions: Transitions[Any]
    make: Callable[[Kit, Meter, Recorder], Any]


ROLES = [
    RoleKind("users", UserPopulation, USER_TRANSITIONS, _users),
    RoleKind("S_tag", TaggingServer, TAGGING_TRANSITIONS, _s_tag),
    RoleKind("S_syn", SynthesisServer, SYNTHESIS_TRANSITIONS, _s_syn),
    RoleKind("proxy", AnonymizingProxy, PROXY_TRANSITIONS, _proxy),
    RoleKind("dummy_user", DummyUser, DUMMY_TRANSITIONS, _dummy),
]
BY_NAME = {kind.name: kind for kind in ROLES}


def _refused() -> Iterator[Any]:
    """Every (role, message, state) its table refuses."""
    for kind in ROLES:
        for message, moves in kind.transitions.table.items():
            for state in kind.transitions.states:
                if state not in moves:
                    yield pytest.param(kind.name, message, state, id=f"{kind.name}-{message}-in-{state.value}")


# -- (c): what a refusal must leave alone ---------------------------------------------------------------
def _snapshot(role: Any, meter: Meter, recorder: Recorder) -> tuple[Any, ...]:
    attrs = {k: repr(v) for k, v in vars(role).items()}
    return role.state, attrs, recorder.rows_recorded, recorder.bytes_recorded, repr(meter.to_dict())


def _assert_refused(kind: RoleKind, role: Any, message: str, meter: Meter, recorder: Recorder) -> None:
    before = _snapshot(role, meter, recorder)
    state = role.state
    with pytest.raises(OutOfOrderError) as caught:
        CALLS[kind.name][message](role)
    err = caught.value
    assert isinstance(err, ProtocolStateError)
    assert (err.role, err.state, err.message) == (kind.transitions.role, state, message)
    assert err.expected == kind.transitions.expected(state)
    text = str(err)
    assert kind.transitions.role in text and repr(state.value) in text and repr(message) in text
    assert all(m in text for m in err.expected)
    assert _snapshot(role, meter, recorder) == before


def _refuse_all_but_accepted(kind: RoleKind, role: Any, meter: Meter, recorder: Recorder) -> None:
    """In the state the role is in now, every message its table does not take is refused."""
    for message, moves in kind.transitions.table.items():
        if role.state not in moves:
            _assert_refused(kind, role, message, meter, recorder)


# -- the tables themselves -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(BY_NAME))
def test_every_declared_message_is_a_checked_method(name: str) -> None:
    """Each message of a table has a call here and a checked method on its role; each checked
    method's message is in the table; every state is reachable from the initial one."""
    kind = BY_NAME[name]
    assert set(CALLS[name]) == set(kind.transitions.table)
    checked = {
        getattr(fn, "__protocol_message__", None) for fn in vars(kind.cls).values() if hasattr(fn, "__protocol_message__")
    }
    if kind.cls is AnonymizingProxy:  # messages named by method and phase
        assert len(checked) == 3 and not any(isinstance(m, str) for m in checked)
    else:
        assert checked == set(kind.transitions.table)
    reached, frontier = {kind.transitions.initial}, [kind.transitions.initial]
    while frontier:
        state = frontier.pop()
        for moves in kind.transitions.table.values():
            nxt = moves.get(state)
            if nxt is not None and nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert reached == set(kind.transitions.states)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_a_new_role_starts_in_its_initial_state(kit: Kit, name: str) -> None:
    kind = BY_NAME[name]
    assert kind.make(kit, Meter(), Recorder(None)).state is kind.transitions.initial


# -- (b) and (c) in every refused (message, state) --------------------------------------------------------
@pytest.mark.parametrize(("name", "message", "state"), list(_refused()))
def test_a_message_out_of_order_is_refused_and_changes_nothing(kit: Kit, name: str, message: str, state: Enum) -> None:
    kind = BY_NAME[name]
    meter, recorder = Meter(), Recorder(None)
    role = kind.make(kit, meter, recorder)
    role._state = state  # the check comes before any work: the state alone decides
    _assert_refused(kind, role, message, meter, recorder)


def test_the_error_survives_pickling(kit: Kit) -> None:
    """A refusal raised in a Dask actor or a worker process reaches the driver as raised."""
    import pickle

    with pytest.raises(OutOfOrderError) as caught:
        _s_syn(kit, Meter(), Recorder(None)).reconstruct([], sharing=None, encoder=None)
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is OutOfOrderError and str(again) == str(caught.value)
    assert (again.role, again.state, again.message, again.expected) == (
        "S_syn", SynthesisState.COUNTING, "reconstruct", ("receive_submissions", "release"),
    )


def test_the_proxy_refuses_a_phase_it_does_not_relay(kit: Kit) -> None:
    meter, recorder = Meter(), Recorder(None)
    proxy = _proxy(kit, meter, recorder)
    for call in (lambda: proxy.forward("aggregation", []), lambda: proxy.route_back(PHASE2, Delivery(0, Role.S_TAG, []), [])):
        with pytest.raises(OutOfOrderError, match="proxy in state 'phase1'"):
            call()
    assert proxy.state is ProxyState.PHASE1 and recorder.rows_recorded == 0


# -- (a) the legitimate orders ---------------------------------------------------------------------------------
class Round:
    """The roles of one round on one meter and recorder, each step checked: the state it leads to,
    and that in that state every message the table refuses is refused and changes nothing."""

    def __init__(self, kit: Kit, *, keep: bool = True) -> None:
        self.kit = kit
        self.meter, self.recorder = Meter(), Recorder(None)
        self.s_tag = _s_tag(kit, self.meter, self.recorder, keep=keep)
        self.s_syn = _s_syn(kit, self.meter, self.recorder, keep=keep)
        self.proxy = _proxy(kit, self.meter, self.recorder)
        self.seen: dict[str, list[Enum]] = {}

    def at(self, name: str, role: Any, state: Enum) -> None:
        assert role.state is state, (name, role.state, state)
        self.seen.setdefault(name, []).append(state)
        _refuse_all_but_accepted(BY_NAME[name], role, self.meter, self.recorder)

    def phase1(self, users: UserPopulation, *, prepare: tuple[str, ...] = ()) -> list[tuple[int, Role, bytes]]:
        """Blind, evaluate, finalize, submit: the submissions, not yet delivered to S_syn."""
        users.prepare(*([prepare] if prepare else []))
        self.at("users", users, UserState.PREPARED)
        answered: list[tuple[int, bytes]] = []
        for role, delivery in self.proxy.forward(PHASE1, users.blind_requests()).items():
            assert role is Role.S_TAG
            self.at("users", users, UserState.BLINDED)
            self.at("proxy", self.proxy, ProxyState.PHASE1)
            answered += self.proxy.route_back(PHASE1, delivery, self.s_tag.evaluate(delivery.ciphertexts))
            self.at("S_tag", self.s_tag, TaggingState.EVALUATING)
        users.receive_evaluations(answered)
        self.at("users", users, UserState.FINALIZED)
        assert all(t is not None for t in users.tags)
        submissions = users.tag_submissions()
        self.at("users", users, UserState.SUBMITTED)
        return submissions

    def submit(self, submissions: list[tuple[int, Role, bytes]]) -> None:
        for role, delivery in self.proxy.forward(PHASE1_SUBMIT, submissions).items():
            assert role is Role.S_SYN
            self.s_syn.receive_submissions(delivery.ciphertexts)
            self.at("S_syn", self.s_syn, SynthesisState.COUNTING)
        self.at("proxy", self.proxy, ProxyState.PHASE1)

    def broadcast(self) -> tuple[bytes, dict[bytes, int], Any]:
        full = self.s_syn.release()
        self.at("S_syn", self.s_syn, SynthesisState.RELEASED)
        message = self.proxy.broadcast(BROADCAST, Role.S_SYN, self.s_syn.user_broadcast())
        self.at("S_syn", self.s_syn, SynthesisState.RELEASED)
        self.at("proxy", self.proxy, ProxyState.PHASE2)
        self.s_tag.receive_broadcast(full)
        self.at("S_tag", self.s_tag, TaggingState.INFORMED)
        self.s_tag.receive_tokens(self.s_syn.released_tokens())
        self.at("S_syn", self.s_syn, SynthesisState.RELEASED)
        self.at("S_tag", self.s_tag, TaggingState.COLLECTING)
        released = dict(self.s_syn.released)
        assert len(released) == 2
        return message, released, phase2_plan(INF, DIM, CONFIG, self.kit.comps, released)

    def deliver(self, shares: list[tuple[int, Role, bytes]], plan: Any) -> None:
        for role, delivery in self.proxy.forward(PHASE2, shares).items():
            server = self.s_tag if role is Role.S_TAG else self.s_syn
            server.receive_shares(delivery.ciphertexts, sharing=plan.sharing, dim=plan.width)
        self.at("proxy", self.proxy, ProxyState.PHASE2)
        self.at("S_tag", self.s_tag, TaggingState.COLLECTING)
        self.at("S_syn", self.s_syn, SynthesisState.RELEASED)

    def settle(self, plan: Any) -> None:
        named = self.s_syn.pending_contributions()
        self.at("S_syn", self.s_syn, SynthesisState.RELEASED)
        common = self.s_tag.settle_contributions(named, sharing=plan.sharing, dim=plan.width)
        self.at("S_tag", self.s_tag, TaggingState.COLLECTING)
        self.s_syn.settle_contributions(common, sharing=plan.sharing, dim=plan.width)
        self.at("S_syn", self.s_syn, SynthesisState.RELEASED)

    def aggregate(self, plan: Any, contributors: int) -> None:
        accepted = self.s_syn.accepted_contributions()
        self.at("S_syn", self.s_syn, SynthesisState.AGGREGATING)
        aggregates = self.s_tag.aggregate(accepted, sharing=plan.sharing)
        self.at("S_tag", self.s_tag, TaggingState.AGGREGATED)
        result = self.s_syn.reconstruct(aggregates, sharing=plan.sharing, encoder=plan.encoder)
        self.at("S_syn", self.s_syn, SynthesisState.RECONSTRUCTED)
        assert sum(result.contributors.values()) == contributors and not result.withheld


def test_the_in_process_order_reaches_every_declared_state_of_each_role(kit: Kit) -> None:
    """One population plays the whole round (the in-process driver and the networked users);
    the servers keep every contribution; S_tag's dummy user submits once."""
    rnd = Round(kit)
    users = _users(kit, rnd.meter, rnd.recorder)
    rnd.at("users", users, UserState.NEW)
    rnd.at("S_tag", rnd.s_tag, TaggingState.EVALUATING)
    rnd.at("S_syn", rnd.s_syn, SynthesisState.COUNTING)
    rnd.at("proxy", rnd.proxy, ProxyState.PHASE1)
    dummy = _dummy(kit, rnd.meter, rnd.recorder)
    rnd.at("dummy_user", dummy, DummyState.READY)
    dummies = dummy.submissions(1.5)  # below a floor of 2: dummies never change the released set
    rnd.at("dummy_user", dummy, DummyState.SUBMITTED)
    rnd.submit(rnd.phase1(users) + dummies)
    message, _, plan = rnd.broadcast()
    users.receive_broadcast(message)
    rnd.at("users", users, UserState.INFORMED)
    shares = users.share_submissions(encoder=plan.encoder, sharing=plan.sharing, noise=False)
    rnd.at("users", users, UserState.SENT)
    assert len(shares) == 2 * N  # contributions and cover, two messages a user
    rnd.deliver(shares, plan)
    rnd.aggregate(plan, contributors=int(users.submitted.sum()))
    assert set(rnd.seen["users"]) == set(UserState) - {UserState.RESTORED, UserState.SHARED}
    assert set(rnd.seen["dummy_user"]) == set(DummyState)
    assert set(rnd.seen["proxy"]) == set(ProxyState)
    assert set(rnd.seen["S_tag"]) == set(TaggingState)
    assert set(rnd.seen["S_syn"]) == set(SynthesisState)


@pytest.mark.parametrize("hears", ["after_prepare", "before_prepare"])
def test_windows_with_running_sums_and_restored_devices_follow_the_tables(kit: Kit, hears: str) -> None:
    """The streaming and Dask order: phase 1 window by window (S_tag evaluates each, S_syn gets
    every submission after the last window); phase 2 on devices restored from their phase-1
    outcome, which prepare their phase-2 seals and hear the broadcast (the first window only) in
    either order (streaming: after preparing; Dask: before); the servers keep running sums and
    settle after each window; the aggregation as in-process."""
    rnd = Round(kit, keep=False)
    windows = [range(0, 2 * CHUNK), range(2 * CHUNK, N)]
    held: list[tuple[int, Role, bytes]] = []
    tags: list[bytes | None] = []
    tokens: list[bytes | None] = []
    submitted: list[bool] = []
    for span in windows:
        users = _users(kit, rnd.meter, rnd.recorder, span)
        held += [(span.start + i, r, e) for i, r, e in rnd.phase1(users, prepare=PHASE1_SEALS)]
        tags, tokens, submitted = tags + users.tags, tokens + users.tokens, submitted + users.submitted.tolist()
    rnd.submit(held)
    message, released, plan = rnd.broadcast()
    participants = [i for i in range(N) if submitted[i] and tags[i] in released]
    plains = dict(zip(participants, share_plaintexts(
        np.linspace(-0.2, 0.2, N * DIM).reshape(N, DIM)[participants], [tags[i] for i in participants],
        encoder=plan.encoder, sharing=plan.sharing, noise=False, rng=RandomSource.seeded(6, "phase2"),
        meter=rnd.meter, tokens=[tokens[i] for i in participants],
    ), strict=True))
    for k, span in enumerate(windows):
        devices = _users(kit, rnd.meter, rnd.recorder, span)
        lo, hi = span.start, span.stop
        devices.restore(tags[lo:hi], np.array(submitted[lo:hi]), HeardBroadcast(message), tokens=tokens[lo:hi])
        rnd.at("users", devices, UserState.RESTORED)
        steps: list[Callable[[], None]] = [lambda d=devices: d.prepare(PHASE2_SEALS)]
        if k == 0:
            steps.insert(0 if hears == "before_prepare" else 1, lambda d=devices: d.receive_broadcast(message))
        for run_step in steps:
            run_step()
            rnd.at("users", devices, UserState.RESTORED)
        mine = [i for i in participants if i in span]
        shares = devices.sealed_shares([i - lo for i in mine], [plains[i] for i in mine])
        rnd.at("users", devices, UserState.SHARED)
        cover = np.array([i - lo for i in span if i not in participants], dtype=np.int64)
        shares += devices.cover_messages(cover, plan.sharing.share_sizes(plan.width))
        rnd.at("users", devices, UserState.SENT)
        assert len(shares) == 2 * len(span)
        rnd.deliver(shares, plan)
        rnd.settle(plan)
    rnd.aggregate(plan, contributors=len(participants))
    assert {UserState.RESTORED, UserState.SHARED, UserState.SENT} <= set(rnd.seen["users"])
