"""The reference driver: the whole round in one process, every message at once (design §6, §13).

:func:`run_protocol` plays the round as a sequence of role calls, each stage's messages moved
through the in-process proxy (:mod:`fre_protocol.drivers.local`):

1. local pre-processing (public grid → bucket index b_i → its canonical encoding),
2. phase 1: blind → proxy → S_tag evaluates with proofs → proxy → users verify and finalize → tag
   h_i; with its coin a user seals h_i to S_syn; S_tag's dummy user adds TSDLap dummy tags; the
   proxy shuffles; S_syn counts, thresholds at τ and broadcasts the released tags with counts,
3. phase 2: users of released tags DDG-encode x_i, share it, seal one share to each server; each
   server keeps its shares per tag; S_syn tells S_tag which contributions it accepted; S_tag sends
   its aggregate share per tag; S_syn reconstructs, decodes, divides by the contributors,

and returns a :class:`~mechanism.release.Release` whose ledger is the protocol's. Every message is
real and recorded (with ``RunOptions.out_dir``) in the receiver's view and the proxy's view of
``transcript.sqlite``. :func:`play` is the executable specification that every other driver
matches: a new driver moves the same messages between the same roles, in its own windows,
processes or machines, and passes the driver conformance suite.

Randomness: public randomness (projection, offsets) from the public seed; coins from
:func:`mechanism.fre_e2t.sample_coins` (seeded only in test mode, where they equal the
mechanism's, which is what makes the two comparable); every secret draw from a labelled stream
(:mod:`fre_protocol.roles.streams`), cryptographic unless the seed plan is in test mode.
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from fre_protocol.drivers.local import (
    ProtocolResult,
    broadcast,
    execute,
    finish,
    phase1,
    phase1_submit,
    phase2,
)
from fre_protocol.roles.base import Runtime
from fre_protocol.roles.config import RoundSpec, RunOptions
from fre_protocol.roles.proxy import NetworkAdversary
from fre_protocol.roles.round import (
    RunPlan,
    heard_by,
    make_dummy_user,
    plan_devices,
    plan_phase2,
    plan_run,
    population,
    setup,
)
from fre_protocol.roles.synthesis_server import ContributionValidator
from mechanism.release import Release


def run_protocol(
    x: npt.ArrayLike,
    spec: RoundSpec,
    options: RunOptions | None = None,
    *,
    users: npt.ArrayLike | None = None,
    adversary: NetworkAdversary | None = None,
    validator: ContributionValidator | None = None,
) -> ProtocolResult:
    """Run Fre-E2T's distributed protocol on embeddings ``x`` (one row per text; one per user
    unless ``users`` groups them) with the round's choices ``spec``; ``options`` says what the
    run keeps (files, transcript mode, progress, memory).

    ``adversary`` sits on the network at the proxy (it may drop, replay, tamper with or inject
    messages), for robustness tests. ``validator`` is S_syn's per-contribution validity check
    (none by default; see :class:`~fre_protocol.roles.synthesis_server.ContributionValidator`).
    With ``options.out_dir`` it writes ``centroids.npy`` + ``release.json`` (the mechanism's
    contract) and ``transcript.sqlite``.

    Several texts per user (design §4.6): ``spec.unit = PrivacyUnit(kind="user", cap=c, ...)``
    and ``users`` (one label per row). Each user's device then plays c slots
    (:mod:`fre_protocol.slots`), padding included, the proxy refuses a user's (c+1)-th message
    of a kind, ``dropout`` draws people and the ledger states the per-user guarantee.
    """
    run = plan_run(x, spec, users=users)
    return execute(run, play, options, adversary=adversary, validator=validator)


def play(run: RunPlan, driver: Runtime, store: Any) -> tuple[Release, dict[str, Any]]:
    """The protocol as a sequence of role calls (design §6); each stage meters its own phase."""
    parties = setup(run, driver)
    users = population(run, parties.keys, driver, range(run.n))
    with driver.meter.phase("users_offline"):
        users.prepare()
    phase1(parties, users, driver)
    dummy_user = make_dummy_user(run, parties, driver)
    with driver.meter.phase("phase1_submit"):
        dummies = dummy_user.submissions(run.params.tau) if dummy_user is not None else []
        phase1_submit(parties, users.tag_submissions() + dummies, driver)
    released, _ = broadcast(parties, driver, users)
    plan = plan_phase2(run, released)
    # The devices' plan from the compact broadcast alone (each reads its own tag's count).
    mine = plan_devices(run, heard_by(run, users), like=plan)
    with driver.meter.phase("phase2_shares"):
        shares = users.share_submissions(
            encoder=mine.encoder, sharing=mine.sharing, noise=run.noise, active=~run.dropped_mask,
            sigmas=mine.sigmas,
        )
        phase2(parties, plan, shares, driver)
    return finish(run, parties, plan, released, driver, dummy_user, users.tally(), store)


__all__ = ["play", "run_protocol"]
