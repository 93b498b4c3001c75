"""S_syn as an HTTPS service (mutual TLS; its caller is the proxy; it calls S_tag).

Endpoints (``/v1/...``; round id and idempotency key on every request):

* ``POST /v1/submissions`` (proxy): a shuffled batch of sealed tag submissions (users' and the
  dummy user's, indistinguishable);
* ``POST /v1/release`` (proxy, once): count, threshold at ⌈τ⌉ → the users' compact broadcast of
  the released tags (CompactBroadcast, the round's encoding; design §6);
* ``POST /v1/tokens`` (S_tag, after the release): the full list of released tags with their
  counts (ReleasedTags), then each released tag's token hashes (ReleasedTokens, design §6.8), over
  the servers' mutual-TLS channel; the hashes are never published;
* ``POST /v1/phase2`` (proxy): a batch of sealed shares (or cover messages);
* ``POST /v1/aggregate`` (proxy or operator, once): S_syn sends S_tag its accepted contributions,
  logs S_tag's aggregate shares, reconstructs, decodes and publishes the release; then it writes
  its transcript and deletes its keys and the users' shares;
* ``GET /v1/release`` (anyone, after the round): ``release.json`` and the centroids;
  ``GET /v1/diagnostics`` (operator): the operator-private counts;
* ``GET /v1/keys`` (anyone): S_syn's sealing key for this round.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fre_protocol.drivers.net.logged import LoggedServer
from fre_protocol.drivers.net.peers import PeerClient
from fre_protocol.drivers.net.round import RoundDocument
from fre_protocol.drivers.net.service import require_peer
from fre_protocol.drivers.net.wire import NotReadyError, decode_batch, encode_batch
from fre_protocol.messages import Role
from fre_protocol.roles.base import Meter, Recorder
from fre_protocol.roles.broadcast import broadcast_seed, encoding_name
from fre_protocol.roles.broadcast import encoding as broadcast_encoding
from fre_protocol.roles.release import synthesis_release
from fre_protocol.roles.round import Phase2Plan, box_key
from fre_protocol.roles.synthesis_server import Reconstruction, SynthesisServer
from mechanism.release import Release
from primitives.errors import ProtocolStateError

SUBMISSIONS, RELEASE, PHASE2, AGGREGATES, AGGREGATE = "submissions", "release", "phase2", "aggregates", "aggregate"
TOKENS = "tokens"
RELEASE_KEY, DIAGNOSTICS_KEY = "release", "diagnostics"
NOT_YET = "the release of tags"


class SynService(LoggedServer):
    role = Role.S_SYN.label

    progress = ("party", "phase2", "result")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.phase2: Phase2Plan | None = None
        self.result: Reconstruction | None = None
        super().__init__(*args, **kwargs)
        self.peers = PeerClient(self.config)

    def make_keys(self) -> dict[str, bytes]:
        sk, pk = box_key(self.ctx.seeds, self.ctx.comps.channel, Role.S_SYN)
        return {"box_sk": sk.reveal(), "box_pk": pk}

    def public_keys(self) -> dict[str, str]:
        return {"S_syn_box": self.keys["box_pk"].hex()} if self.keys else {}

    def own_keys(self, doc: RoundDocument) -> bool:
        return doc.syn_box_key == self.keys["box_pk"]

    def new_party(self, recorder: Recorder, meter: Meter) -> SynthesisServer:
        return SynthesisServer(
            box_key=self.key_pair("box"), channel=self.ctx.comps.channel, workers=self.workers,
            meter=meter, recorder=recorder, release_floor=self.ctx.floor,
            broadcast=broadcast_encoding(encoding_name(self.ctx.comps.names)),
            broadcast_seed=broadcast_seed(self.ctx.seeds.public_seed),
        )

    def apply(self, kind: str, body: bytes, *, replay: bool) -> bytes:
        party: SynthesisServer = self.party
        if kind == SUBMISSIONS:
            if self.phase2 is not None:
                raise ProtocolStateError("tag submissions after the release of tags")
            party.receive_submissions(decode_batch(body))
            return b""
        if kind == RELEASE:
            if self.phase2 is not None and not replay:
                raise ProtocolStateError("the tags were already released")
            party.release()
            self.phase2 = self.ctx.phase2(party.released)
            return party.user_broadcast()
        if kind == PHASE2:
            return self.receive_shares(body, before=NOT_YET)
        p2 = self.phase2_plan(kind, before=NOT_YET)
        if kind == TOKENS:
            return encode_batch([party.released_list(), *party.released_tokens()])
        if kind == AGGREGATES:
            self.result = party.reconstruct(
                decode_batch(body), sharing=p2.sharing, encoder=p2.encoder, policy=self.settings.protocol.dropout_policy,
                plan=p2.noise,
            )
            return b""
        if kind == AGGREGATE:
            return b"" if replay else self._aggregate()
        raise ProtocolStateError(f"unknown request kind {kind!r}")

    def _aggregate(self) -> bytes:
        """Ask S_tag for its aggregate shares over S_syn's accepted contributions (logged before
        use, so a restart reconstructs from the same shares), reconstruct, publish."""
        if AGGREGATES not in self.logged_kinds():
            accepted = encode_batch(self.party.accepted_contributions())
            answer = self.peers.post(
                Role.S_TAG.label, "/v1/aggregate", accepted, request_id=f"{self.settings.round_id}/aggregate"
            )
            self.apply(AGGREGATES, answer, replay=False)
            # Logged with what reconstructing recorded, before anything depends on it.
            self.log(f"{self.settings.round_id}/aggregates", AGGREGATES, answer, b"", self.collector.take())
        release, diagnostics = self._assemble()
        document = json.dumps(release.to_json(), sort_keys=True).encode()
        self.state.put(RELEASE_KEY, document)
        self.state.put("centroids", np.ascontiguousarray(release.centroids, dtype="<f8").tobytes())
        self.state.put(DIAGNOSTICS_KEY, json.dumps(diagnostics, sort_keys=True).encode())
        return document

    def _assemble(self) -> tuple[Release, dict[str, Any]]:
        """The release as every driver's S_syn assembles it (:func:`synthesis_release`), from
        this service's state alone; and its operator diagnostics."""
        assert self.result is not None and self.phase2 is not None
        release = synthesis_release(self.ctx.public_plan(), self.party, self.phase2, self.result)
        return release, release.diagnostics

    def accept(self, rid: str, kind: str, body: bytes) -> bytes:
        out = super().accept(rid, kind, body)
        if kind == AGGREGATE:
            with self.lock:
                if self.party is not None and self.keys:
                    self._finish()
        return out

    def _finish(self) -> None:
        assert self.phase2 is not None
        release = json.loads(self.state.get(RELEASE_KEY) or b"{}")
        artifacts: dict[str, Any] = {
            "release": release,
            "diagnostics": json.loads(self.state.get(DIAGNOSTICS_KEY) or b"{}"),
            "ledger": release.get("ledger"),
            "ddg_config": self.phase2.ddg_config.to_dict(),
            "centroids": self.state.get("centroids") or b"",
        }
        if self.ctx.seeds.rng_mode == "seeded":
            artifacts["secrets/S_syn_box_sk"] = bytes(self.keys["box_sk"])
        self.finalize(artifacts=artifacts, share_kinds=(PHASE2,))

    def routes(self) -> list[Route]:
        proxy = (Role.PROXY.label,)

        async def keys(request: Request) -> Response:
            return JSONResponse(self.public_keys())

        async def release(request: Request) -> Response:
            document, centroids = self.state.get(RELEASE_KEY), self.state.get("centroids")
            if document is None or centroids is None:
                raise NotReadyError("the round has not been released yet")
            return Response(encode_batch([document, centroids]), media_type="application/octet-stream")

        async def diagnostics(request: Request) -> Response:
            require_peer(request, ("operator",))
            data = self.state.get(DIAGNOSTICS_KEY)
            if data is None:
                raise NotReadyError("the round has not been released yet")
            return Response(data, media_type="application/json")

        return self.document_routes() + [
            Route("/v1/keys", self.endpoint("keys", keys), methods=["GET"]),
            Route("/v1/release", self.endpoint("release", release), methods=["GET"]),
            Route("/v1/diagnostics", self.endpoint("diagnostics", diagnostics), methods=["GET"]),
            Route("/v1/submissions", self.handler(SUBMISSIONS, proxy), methods=["POST"]),
            Route("/v1/release", self.handler(RELEASE, proxy), methods=["POST"]),
            Route("/v1/phase2", self.handler(PHASE2, proxy), methods=["POST"]),
            Route("/v1/tokens", self.handler(TOKENS, (Role.S_TAG.label,)), methods=["POST"]),
            Route("/v1/aggregate", self.handler(AGGREGATE, proxy + ("operator",)), methods=["POST"]),
        ]


__all__ = ["SynService"]
