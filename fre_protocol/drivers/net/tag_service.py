"""S_tag as an HTTPS service (mutual TLS; its callers are the proxy and S_syn).

Endpoints (``/v1/...``, each request carries the round id and an idempotency key):

* ``POST /v1/phase1`` (proxy): a shuffled batch of sealed blind requests → their evaluations, by
  position (RFC 9497 VOPRF with DLEQ proofs);
* ``POST /v1/dummies`` (proxy, once): the dummy user's sealed tag submissions (TSDLap padding),
  which the proxy shuffles in with the users' submissions before S_syn sees any;
* ``POST /v1/broadcast`` (proxy, empty body): S_syn has released the tags (the users get the
  compact broadcast from the proxy); before answering, S_tag fetches the full list of released
  tags with their counts and each released tag's token hashes from S_syn (``POST /v1/tokens`` on
  S_syn, mutual TLS; design §6, §6.8) and logs them, so no share reaches it before they do;
* ``POST /v1/phase2`` (proxy): a batch of sealed shares (or cover messages);
* ``POST /v1/aggregate`` (S_syn, once): S_syn's accepted contributions → S_tag's aggregate shares,
  answered once per tag and only over at least the release floor; then S_tag writes its
  transcript and deletes its keys and the users' shares;
* ``GET /v1/keys`` (anyone): S_tag's public keys for this round.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fre_protocol.drivers.net.logged import LoggedServer
from fre_protocol.drivers.net.peers import PeerClient
from fre_protocol.drivers.net.round import RoundDocument
from fre_protocol.drivers.net.wire import decode_batch, encode_batch
from fre_protocol.messages import Role
from fre_protocol.roles.base import Meter, Recorder
from fre_protocol.roles.dummy_user import DummyUser
from fre_protocol.roles.round import Phase2Plan, box_key, tagging_key
from fre_protocol.roles.tagging_server import TaggingServer
from primitives.errors import ProtocolStateError

PHASE1, DUMMIES, BROADCAST, PHASE2, AGGREGATE = "phase1", "dummies", "broadcast", "phase2", "aggregate"
TOKENS = "tokens"
NOT_YET = "the broadcast of released tags"
DUMMY_PLAN = "dummy_plan"


class TagService(LoggedServer):
    role = Role.S_TAG.label

    progress = ("party", "phase2")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.phase2: Phase2Plan | None = None
        super().__init__(*args, **kwargs)
        self.peers = PeerClient(self.config)

    def make_keys(self) -> dict[str, bytes]:
        voprf_sk, voprf_pk = tagging_key(self.ctx.seeds, self.ctx.comps.suite)
        box_sk, box_pk = box_key(self.ctx.seeds, self.ctx.comps.channel, Role.S_TAG)
        return {"voprf_sk": voprf_sk.reveal(), "voprf_pk": voprf_pk, "box_sk": box_sk.reveal(), "box_pk": box_pk}

    def public_keys(self) -> dict[str, str]:
        return {"voprf": self.keys["voprf_pk"].hex(), "S_tag_box": self.keys["box_pk"].hex()} if self.keys else {}

    def new_party(self, recorder: Recorder, meter: Meter) -> TaggingServer:
        cfg = self.settings.protocol
        return TaggingServer(
            suite=self.ctx.comps.suite, voprf_key=self.key_pair("voprf"), box_key=self.key_pair("box"),
            channel=self.ctx.comps.channel, rng=self.ctx.seeds.secret("S_tag"), workers=self.workers,
            meter=meter, recorder=recorder, release_floor=self.ctx.floor,
            dropout_policy=cfg.dropout_policy, proof_batch_size=cfg.proof_batch_size,
            record_shares=self.ctx.seeds.rng_mode == "seeded",
        )

    def apply(self, kind: str, body: bytes, *, replay: bool) -> bytes:
        party: TaggingServer = self.party
        if kind == PHASE1:
            return encode_batch(party.evaluate(decode_batch(body)))
        if kind == DUMMIES:
            return b"" if replay else self._dummies()
        if kind == BROADCAST:
            # The proxy's word that the tags are released; the list itself comes from S_syn.
            if self.phase2 is not None and not replay:
                raise ProtocolStateError("the broadcast was already received")
            return b""
        if kind == TOKENS:
            # S_syn's answer, over the servers' channel: the full list, then the token hashes.
            if self.phase2 is not None and not replay:
                raise ProtocolStateError("the released tags were already received")
            items = decode_batch(body)
            if not items:
                raise ProtocolStateError("S_syn's answer must start with the released tags")
            party.receive_broadcast(items[0])
            self.phase2 = self.ctx.phase2(party.released)
            party.receive_tokens(items[1:])
            return b""
        if kind == PHASE2:
            return self.receive_shares(body, before=NOT_YET)
        p2 = self.phase2_plan(kind, before=NOT_YET)
        if kind == AGGREGATE:
            answers = party.aggregate(decode_batch(body), sharing=p2.sharing, noise=self.ctx.user_noise(p2), plan=p2.noise)
            return encode_batch(answers)
        raise ProtocolStateError(f"unknown request kind {kind!r}")

    def _dummies(self) -> bytes:
        """The dummy user's sealed submissions, made once per round (the plan is S_tag's secret;
        its summary is kept for the operator)."""
        if not self.ctx.params.is_dp:
            return encode_batch([])
        if DUMMIES in self.logged_kinds():
            raise ProtocolStateError("the dummy submissions were already sent for this round")
        dummy = DummyUser(
            generator=self.ctx.comps.make_dummy_generator(*self.ctx.dummy), channel=self.ctx.comps.channel,
            syn_box_key=self.syn_box_key(), rng=self.ctx.seeds.secret("S_tag/dummy"), workers=self.workers,
            meter=self.meter,
        )
        envelopes = [env for _, _, env in dummy.submissions(self.ctx.params.tau)]
        self.state.put(DUMMY_PLAN, json.dumps(dummy.summary()).encode())
        return encode_batch(envelopes)

    def _fetch_tokens(self) -> None:
        """S_syn's full list of released tags and its ReleasedTokens for them, logged as a request of their own right
        after the broadcast (a restart replays them in that order; a repeated broadcast fetches
        them only if they are not logged yet). Fixed request ids: S_syn answers a retry from
        its log."""
        rid = self.settings.round_id
        answer = self.peers.post(Role.S_SYN.label, "/v1/tokens", b"", request_id=f"{rid}/tokens")
        super().accept(f"{rid}/tokens", TOKENS, answer)

    def syn_box_key(self) -> bytes:
        """S_syn's sealing key, from the round document S_tag checked."""
        return self.round_document().syn_box_key

    def own_keys(self, doc: RoundDocument) -> bool:
        return doc.voprf_public_key == self.keys["voprf_pk"] and doc.tag_box_key == self.keys["box_pk"]

    def after_aggregate(self) -> None:
        artifacts = {"dummies": json.loads(self.state.get(DUMMY_PLAN) or b"null")}
        if self.ctx.seeds.rng_mode == "seeded":
            artifacts["secrets/voprf_sk"] = bytes(self.keys["voprf_sk"])
            artifacts["secrets/S_tag_box_sk"] = bytes(self.keys["box_sk"])
        self.finalize(artifacts=artifacts, share_kinds=(PHASE2,))

    def accept(self, rid: str, kind: str, body: bytes) -> bytes:
        out = super().accept(rid, kind, body)
        if kind == BROADCAST and TOKENS not in self.logged_kinds():
            self._fetch_tokens()
        if kind == AGGREGATE:
            with self.lock:
                if self.party is not None and self.keys:
                    self.after_aggregate()
        return out

    def routes(self) -> list[Route]:
        proxy, syn = (Role.PROXY.label,), (Role.S_SYN.label,)

        async def keys(request: Request) -> Response:
            return JSONResponse(self.public_keys())

        return self.document_routes() + [
            Route("/v1/keys", self.endpoint("keys", keys), methods=["GET"]),
            Route("/v1/phase1", self.handler(PHASE1, proxy), methods=["POST"]),
            Route("/v1/dummies", self.handler(DUMMIES, proxy), methods=["POST"]),
            Route("/v1/broadcast", self.handler(BROADCAST, proxy), methods=["POST"]),
            Route("/v1/phase2", self.handler(PHASE2, proxy), methods=["POST"]),
            Route("/v1/aggregate", self.handler(AGGREGATE, syn), methods=["POST"]),
        ]


__all__ = ["TagService"]
