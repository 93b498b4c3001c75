"""``fre-e2t join``: one user's device against a running round.

It embeds the user's text here, with the embedder the round document names (and no other: an
``--embedder`` naming another model is refused before anything is sent; docs/device-client.md
says what a document that names none gets), then plays that one user's whole part of the round
through the users' client with a population of one (:func:`fre_protocol.drivers.net.users_client.play_users`
with ``device=True``: the user role decides every message, the client only moves them): the
round document's two signatures checked against the CA, the blind request, S_tag's proof
verified, the sealed tag submission (with its sampling coin), the compact broadcast queried for
its own tag, then its two shares or two cover messages of the same sizes.

It prints what it sent (each request's step, the envelopes' recipients and sizes). The bucket,
the tag and the count the broadcast gives it are printed only with ``--show-bucket``: they are
the user's alone. Exit 0 when its part is done; otherwise one line on stderr and

* 3: the round is closed (its phase no longer takes this request),
* 4: this credential was already used (or refused) in this round,
* 5: a signature or proof did not verify (nothing more was sent),
* 2: any other error (an ``--embedder`` that is not the round's among them).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

HELP = "play one user (this device) in a running round: embed a text, send its messages, exit when done"

EXIT_CLOSED, EXIT_CREDENTIAL, EXIT_VERIFICATION = 3, 4, 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--round", required=True, metavar="URL", help="the round's proxy (https://host:port)")
    parser.add_argument("--ca", required=True, metavar="FILE",
                        help="the CA certificate that signed the services' and the servers' role certificates")
    parser.add_argument("--credential", required=True, metavar="FILE", help="a file holding this user's credential")
    text = parser.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", metavar="TEXT", help="the user's text")
    text.add_argument("--text-file", metavar="FILE", help="a UTF-8 file holding the user's text")
    text.add_argument("--embedding", metavar="X.npy",
                      help="an already computed embedding (one row, the round's dimension) instead of a text")
    parser.add_argument("--embedder", metavar="NAME_OR_DIR", default=None,
                        help="the sentence-transformers model (name or folder) to embed with; it must be the one the "
                        "round document names (another is refused before anything is sent); needed when the round "
                        "names a model folder (`local:...`), or names no embedder at all (an older document) "
                        "(default: the round's embedder)")
    parser.add_argument("--show-bucket", action="store_true",
                        help="also print this user's bucket, tag and released count (to this terminal only)")
    parser.add_argument("--deadline", type=float, default=900.0, metavar="S",
                        help="give up on a request after S seconds, the wait for phase 1 to close included "
                        "(default 900)")


def _embedder(args: argparse.Namespace, settings: Any) -> tuple[str | None, str]:
    """(the model to embed a text with, None when an embedding is given; the line that names the
    round's embedder). InvalidParameterError when ``--embedder`` names another model than the
    round's, or a text cannot be embedded with the round's model."""
    from fre_protocol.text.embedder import model_id
    from primitives.errors import InvalidParameterError

    named = settings.embedder
    given = None if args.embedder is None else model_id(args.embedder)
    if named is not None:
        if given is not None and given != named.name:
            raise InvalidParameterError(
                f"--embedder names {given!r}, but the round's embedder is {named.name!r} (d = {named.dim}): "
                "a device embeds with the round's model only"
            )
        line = f"embedder {named} (named by the round)"
        if args.embedding is not None:
            return None, line
        if named.name.startswith("local:") and args.embedder is None:
            raise InvalidParameterError(
                f"the round's embedder is the model folder {named.name!r}: pass --embedder DIR with that "
                "folder (its fingerprint must match)"
            )
        return (args.embedder if args.embedder is not None else named.name), line
    # A round document that names no embedder (written before the field, or a round on given embeddings).
    if args.embedding is not None:
        return None, "embedder: the round names none (the embedding is given)"
    if given is None:
        raise InvalidParameterError(
            "the round document names no embedder, so a text cannot be embedded with the round's model: pass "
            "--embedder NAME_OR_DIR naming the model its operator announced, or --embedding X.npy"
        )
    return args.embedder, f"embedder {given} (--embedder; the round names none, not checked)"


def _embedding(args: argparse.Namespace, settings: Any, model: str | None) -> Any:
    import numpy as np

    from primitives.errors import InvalidInputError

    dim = settings.dim
    if model is None:
        from fre_protocol.cli.common import load_embeddings

        x = np.asarray(load_embeddings(args.embedding), dtype=np.float64).reshape(1, -1)
    else:
        from fre_protocol.text.embedder import SentenceTransformerEmbedder

        text = args.text if args.text is not None else Path(args.text_file).read_text(encoding="utf-8")
        if not text.strip():
            raise InvalidInputError("the text is empty")
        normalize = True if settings.embedder is None else settings.embedder.normalize
        # No cache: a device's text is embedded once and its embedding left nowhere on disk.
        # float32 on every CPU (not bfloat16 where AMX makes it faster): one text costs little,
        # and the browser's embedder computes in float32, so a text falls in the same bucket on
        # every device (docs/results/device-embedding.md).
        embedder = SentenceTransformerEmbedder(model, cache=False, normalize=normalize, precision="fp32")
        x = np.asarray(embedder.embed([text]), dtype=np.float64)
    if x.shape != (1, dim):
        raise InvalidInputError(f"the round's dimension is {dim}, the embedding's is {x.shape[1]}")
    if settings.embedder is not None and settings.embedder.normalize:
        norm = float(np.linalg.norm(x))
        if abs(norm - 1.0) > 1e-2:
            raise InvalidInputError(
                f"the round's embedder {settings.embedder.name!r} gives unit-norm rows, the embedding's norm is "
                f"{norm:.6g}: embed with the round's model"
            )
    return x


def _why(exc: BaseException) -> tuple[int, str] | None:
    """The exit status and one line for the failures a user must be told apart."""
    from fre_protocol.drivers.net.peers import PeerError
    from primitives.errors import RateLimitedError, VerificationError

    if isinstance(exc, VerificationError):
        return EXIT_VERIFICATION, f"verification failed, nothing more was sent: {exc}"
    if isinstance(exc, RateLimitedError) or (isinstance(exc, PeerError) and exc.kind in (
        "RateLimitedError", "RefusalBudgetError", "UnauthorizedError"
    )):
        detail = exc.detail if isinstance(exc, PeerError) else str(exc)
        return EXIT_CREDENTIAL, f"credential refused (already used in this round, or not valid for it): {detail}"
    if isinstance(exc, PeerError) and exc.kind == "ProtocolStateError" and "the round is in" in exc.detail:
        return EXIT_CLOSED, f"the round is closed for this request: {exc.detail}"
    return None


#: What each request's envelopes seal (phase 2's, shares or cover, is the user's to see: --show-bucket).
_SEALED = {"phase1": "BlindRequest", "submit": "TagSubmission", "phase2": "ShareSubmission or CoverShare"}


def _describe(step: str, body: bytes) -> str:
    from fre_protocol.drivers.net.wire import decode_batch
    from fre_protocol.messages import SealedEnvelope, decode_as

    envelopes = decode_batch(body, limit=2) if step == "phase2" else [body]
    parts = []
    for data in envelopes:
        env = decode_as(data, SealedEnvelope)
        parts.append(f"SealedEnvelope({_SEALED.get(step, '?')}) to {env.recipient.label} ({len(data)} B)")
    return f"{step:7s} {len(body):6d} B: " + ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    from fre_protocol.drivers.net.users_client import (
        UsersOptions,
        UsersTarget,
        fetch_round,
        play_users,
    )

    ca = Path(args.ca)
    credential = Path(args.credential).read_text(encoding="utf-8").strip()
    say = print
    try:
        settings = asyncio.run(fetch_round(args.round, ca, deadline_s=min(args.deadline, 60.0)))
        say(f"fre-e2t join: round {settings.round_id!r} (signed by S_tag and S_syn), d = {settings.dim}", flush=True)
        # Checked before the text is embedded and before anything is sent.
        model, embedder_line = _embedder(args, settings)
        say(f"  {embedder_line}", flush=True)
        x = _embedding(args, settings, model)
        target = UsersTarget(proxy_url=args.round, ca=ca, settings=settings, credentials=[credential])
        options = UsersOptions(concurrency=1, deadline_s=args.deadline, workers=1, device=True)
        report = play_users(x, target, options)
    except Exception as exc:  # noqa: BLE001 - the three failures a user must tell apart get their own line
        why = _why(exc)
        if why is None:
            raise
        print(f"fre-e2t join: {why[1]}", file=sys.stderr)
        return why[0]
    for step, body in report.sent:
        say(f"  sent {_describe(step, body)}")
    say(f"  received {report.bytes_down} B; status {report.status}")
    if args.show_bucket:
        own = report.own
        outcome = "shares" if own.get("contributed") else "cover messages"
        say(f"  (for you only) bucket {own.get('bucket')} tag {own.get('tag')} submitted {own.get('submitted')} "
            f"released count {own.get('count')}: sent {outcome}")
    if report.status.get("ok", 0) != 1:
        status = ", ".join(report.status)
        if "Verification" in status:
            print(f"fre-e2t join: S_tag's proof did not verify ({status}): no tag was submitted, "
                  "cover messages only", file=sys.stderr)
            return EXIT_VERIFICATION
        print(f"fre-e2t join: this device's phase 1 failed ({status}); cover messages only", file=sys.stderr)
        return 2
    say("fre-e2t join: done")
    return 0
