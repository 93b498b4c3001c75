"""Who plays what on a Dask cluster, and each server as a Dask actor on the worker that plays it
(:mod:`fre_protocol.drivers.dask`).

* **S_tag's worker** (resource ``S_tag``; without one, the first worker): an actor that makes
  S_tag's VOPRF key and sealing key there (derived from the seed plan in test mode, generated
  there otherwise), evaluates, keeps the running sums of its shares, answers the aggregation,
  and plays S_tag's dummy user.
* **S_syn's worker** (resource ``S_syn``; without one, the last worker): an actor that makes
  S_syn's sealing key there, counts tags, thresholds, keeps its running sums and reconstructs.
* **Users' workers** (resource ``users``; without any, every worker): the users' tasks
  (:mod:`fre_protocol.drivers.chunk_tasks`).

An actor builds its server with the step layer (:mod:`fre_protocol.roles.round`), as every
driver does, from public choices and the seed plan (:class:`ServerSpec`), never from a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fre_protocol.drivers.chunk_tasks import components_for
from fre_protocol.messages import Role
from fre_protocol.roles.base import HeldRows, Meter, Row, Runtime, Workers
from fre_protocol.roles.config import ProtocolConfig
from fre_protocol.roles.round import (
    ServerPlan,
    dummy_user_for,
    synthesis_key,
    synthesis_server,
    tagging_keys,
    tagging_server,
)
from fre_protocol.roles.windows import Message, window_dummies
from mechanism.grid import single_threaded_blas
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError, ProtocolStateError

#: Worker resources that name who plays what on a real cluster (``dask worker --resources``).
S_TAG_RESOURCE = "S_tag"
S_SYN_RESOURCE = "S_syn"
USERS_RESOURCE = "users"


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where each role runs: a worker address per server, and the users' task restrictions."""

    s_tag: str
    s_syn: str
    users_resources: dict[str, int] | None

    @classmethod
    def of(cls, client: Any) -> Placement:
        info = client.scheduler_info(n_workers=-1)["workers"]
        if not info:
            raise ProtocolStateError("the Dask cluster must have at least one worker, got none")
        addrs = sorted(info)

        def holding(resource: str) -> list[str]:
            return [a for a in addrs if (info[a].get("resources") or {}).get(resource)]

        users = holding(USERS_RESOURCE)
        return cls(
            s_tag=(holding(S_TAG_RESOURCE) or addrs)[0],
            s_syn=(holding(S_SYN_RESOURCE) or addrs)[-1],
            users_resources={USERS_RESOURCE: 1} if users else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSpec:
    """What a server's actor is built from: public choices and the seed plan, never a key."""

    params: FreParams
    seeds: SeedPlan
    cfg: ProtocolConfig
    components: dict[str, str]
    floor: int
    dummy: tuple[float, float]
    workers: int
    payloads: bool = True  # the transcript keeps messages' bytes (else their sizes only)
    # registry.register() entries among the components, for a worker that did not inherit them.
    registered: tuple[tuple[str, str, str], ...] = ()

    def plan(self) -> ServerPlan:
        return ServerPlan(
            params=self.params, seeds=self.seeds, cfg=self.cfg,
            comps=components_for(self.components, self.workers, self.registered),
            floor=self.floor, dummy=self.dummy,
        )


#: What the driver asks of each actor, by (role, target): the methods it calls and the attributes
#: it reads. :class:`ServerHost` refuses every other name, the servers' keys above all.
ACTOR_CALLS: dict[tuple[str, str], frozenset[str]] = {
    ("S_tag", "server"): frozenset({
        "evaluate", "receive_broadcast", "receive_tokens", "receive_shares", "settle_contributions", "aggregate",
    }),
    ("S_tag", "dummy"): frozenset({"summary"}),
    ("S_syn", "server"): frozenset({
        "receive_submissions", "release", "released_tokens", "user_broadcast", "receive_shares", "pending_contributions",
        "settle_contributions", "accepted_contributions", "reconstruct",
    }),
}
ACTOR_READS: dict[tuple[str, str], frozenset[str]] = {
    ("S_tag", "server"): frozenset({"refused", "rejections"}),
    ("S_tag", "dummy"): frozenset({"plan"}),
    ("S_syn", "server"): frozenset({"counts", "n_submissions", "rejections", "released"}),
}


class ServerHost:
    """One server on the worker that plays it (a Dask actor). Its keys are made here and stay
    here; callers get public keys, the server's answers and the rows it recorded.

    :meth:`call` and :meth:`get` answer only the names in :data:`ACTOR_CALLS` and
    :data:`ACTOR_READS` for this role. One Dask cluster is one trust domain: its workers share a
    scheduler and can read each other's memory, so the allow-list guards against a driver's
    mistake (a key shipped back to the client), not against a hostile worker; S_tag and S_syn
    that must not collude belong on clusters (or services, :mod:`fre_protocol.drivers.net`) of their own.
    """

    def __init__(self, role: str, spec: ServerSpec) -> None:
        plan = spec.plan()
        self._seeds = spec.seeds
        self._recorder = HeldRows(payloads=spec.payloads)
        self._meter = Meter()
        pool = Workers(spec.workers)
        self._driver = Runtime(meter=self._meter, pool=pool, user_pool=pool, recorder=self._recorder)
        self._plan = plan
        self._role = role
        self._targets: dict[str, Any] = {}
        if role == Role.S_TAG.label:
            voprf, box = tagging_keys(plan)
            self._targets["server"] = tagging_server(plan, self._driver, voprf, box, keep_contributions=False)
            self._keys = {"voprf": voprf, "box": box}
        elif role == Role.S_SYN.label:
            box = synthesis_key(plan)
            self._targets["server"] = synthesis_server(plan, self._driver, box, keep_contributions=False)
            self._keys = {"box": box}
        else:
            raise InvalidParameterError(f"role must be {Role.S_TAG.label!r} or {Role.S_SYN.label!r}, got {role!r}")

    def public_keys(self) -> dict[str, bytes]:
        return {name: pair[1] for name, pair in self._keys.items()}

    def dummies(self, syn_box_key: bytes, tau: float, windows: list[range]) -> list[list[Message]]:
        """S_tag's dummy submissions, each in the window its dummy user draws for it."""
        dummy = dummy_user_for(self._plan, syn_box_key, self._driver)
        if dummy is not None:
            self._targets["dummy"] = dummy
        return window_dummies(dummy, tau, self._seeds, windows, self._meter)

    def call(self, target: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Row]]:
        self._allowed(ACTOR_CALLS, target, method)
        with single_threaded_blas():
            out = getattr(self._targets[target], method)(*args, **kwargs)
        return out, self._recorder.take()

    def get(self, target: str, name: str) -> Any:
        self._allowed(ACTOR_READS, target, name)
        return getattr(self._targets[target], name)

    def _allowed(self, table: Mapping[tuple[str, str], frozenset[str]], target: str, name: str) -> None:
        allowed = table.get((self._role, target), frozenset())
        if name not in allowed or target not in self._targets:
            kind = "calls" if table is ACTOR_CALLS else "reads"
            raise ProtocolStateError(
                f"{self._role}'s actor {kind} only {sorted(allowed)} of its {target!r}, got {name!r}"
            )

    def meter(self) -> dict[str, Any]:
        return self._meter.to_dict()

    def test_secrets(self) -> dict[str, bytes]:
        """Seeded test mode only (the transcript then records them): the secret keys."""
        if self._seeds.rng_mode != "seeded":
            raise ProtocolStateError("a server's secret keys leave its worker in seeded test mode only")
        return {name: pair[0].reveal() for name, pair in self._keys.items()}


__all__ = [
    "ACTOR_CALLS", "ACTOR_READS", "S_SYN_RESOURCE", "S_TAG_RESOURCE", "USERS_RESOURCE", "Placement", "ServerHost",
    "ServerSpec",
]
