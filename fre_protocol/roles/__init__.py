"""The protocol's roles and the round's steps: everything a driver moves messages between.

A driver (:mod:`fre_protocol.drivers`) reads this page and the reference driver,
:func:`fre_protocol.drivers.inprocess.play`; it needs nothing else of the roles' insides.

**The roles** (design §6), each an explicit state machine (:mod:`fre_protocol.roles.state`): a
``TRANSITIONS`` table states once which message each state takes and where it leads; a message
that does not fit is refused with :class:`~fre_protocol.roles.state.OutOfOrderError` before any
work or recording, and the role is left as it was. Each party records what it *receives* into
its own transcript view.

========================  =====================================================================
role                      states, in the order a round takes them (messages in brackets)
========================  =====================================================================
``UserPopulation``        new → prepared (prepare: blinds, seals) → blinded (blind_requests) →
                          finalized (receive_evaluations: verify, unblind, tag) → submitted
                          (tag_submissions) → informed (receive_broadcast) → sent
                          (share_submissions; or sealed_shares → shared, cover_messages → sent).
                          A windowed driver's phase-2 devices: new → restored (restore) → shared
                          or sent.
``TaggingServer``         evaluating (evaluate, any number of batches) → informed
                          (receive_broadcast) → collecting (receive_tokens; then receive_shares,
                          settle_contributions) → aggregated (aggregate)
``SynthesisServer``       counting (receive_submissions) → released (release: the full list for
                          S_tag; then user_broadcast: the users' compact broadcast,
                          released_tokens, receive_shares, pending_contributions,
                          settle_contributions) → aggregating (accepted_contributions) →
                          reconstructed (reconstruct)
``AnonymizingProxy``      phase1 (forward and route_back of phase 1, forward of the submissions)
                          → phase2 (broadcast; then forward of phase 2)
``DummyUser``             ready → submitted (submissions: S_tag's TSDLap dummy tags)
========================  =====================================================================

**The round's steps**, written once for every driver; each takes plain values and a
:class:`~fre_protocol.roles.base.Runtime` (the threads, meter and recorder a driver lends):

* :mod:`~fre_protocol.roles.config` — :class:`RoundSpec` (what every entry point takes),
  :class:`RunOptions` (what a run keeps), :class:`ProtocolConfig`;
* :mod:`~fre_protocol.roles.round` — ``plan_run(x, spec)`` (inputs checked, coins, dropouts,
  slots, the dummies' budget: a bad argument fails here, before any message), ``setup`` (keys,
  servers, proxy), ``tagging_server``/``synthesis_server`` from a ``ServerPlan`` (no user data)
  when the servers live elsewhere, ``population`` (the devices of a span of users, starting on a
  chunk boundary), ``make_dummy_user``, ``plan_phase2`` (what the servers derive from the full
  list, with the noise plan of :mod:`~fre_protocol.roles.noise_plan`: each released tag's m_h and
  σ_int, which S_tag's aggregate and S_syn's reconstruction take), ``plan_devices`` (what a
  device derives from the compact broadcast alone: the same ring, and its own σ_int from the
  count it reads, through the same count → m_h → σ_int map), ``topup_noise``;
* :mod:`~fre_protocol.roles.broadcast` — the broadcast between the phases: the full list to
  S_tag, the compact one (component ``broadcast``, public seed) to the users, which each device
  queries for its own tag (:class:`~fre_protocol.roles.broadcast.HeardBroadcast`);
* :mod:`~fre_protocol.roles.windows` — what the roles decide when a round is played in windows:
  the proxy's held submissions and their one shuffle, the dummies' windows, the servers'
  settlement after each window, who sends shares and who sends cover;
* :mod:`~fre_protocol.roles.ledger` and :mod:`~fre_protocol.roles.release` — the ledger and the
  release, assembled from what S_syn holds (``synthesis_release``; ``assemble_release`` adds the
  operator's figures of the other parties);
* :mod:`~fre_protocol.roles.streams` — the labels of the seeded random streams and the rule that
  makes every driver release the same bit for bit: a label names what a draw is for and which
  users it serves (their global chunk), never when or where it runs.
"""

from __future__ import annotations

from fre_protocol.roles.base import Meter, Recorder, Runtime, Workers
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, RunOptions
from fre_protocol.roles.dummy_user import DummyUser
from fre_protocol.roles.proxy import AnonymizingProxy, Delivery
from fre_protocol.roles.state import OutOfOrderError
from fre_protocol.roles.synthesis_server import Reconstruction, SynthesisServer
from fre_protocol.roles.tagging_server import TaggingServer
from fre_protocol.roles.user import ServerKeys, UserPopulation

__all__ = [
    "AnonymizingProxy",
    "Delivery",
    "DummyUser",
    "Meter",
    "OutOfOrderError",
    "ProtocolConfig",
    "Reconstruction",
    "Recorder",
    "RoundSpec",
    "RunOptions",
    "Runtime",
    "ServerKeys",
    "SynthesisServer",
    "TaggingServer",
    "UserPopulation",
    "Workers",
]
