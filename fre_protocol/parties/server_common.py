"""Receiving sealed messages at a server: open, decode, reject replays — shared by both servers.

A server never sees who sent a message (the proxy stripped it); it sees ciphertexts sealed to its
own key. Each one is opened and decoded on the worker threads; replays (a ciphertext already
received) are rejected with :class:`ProtocolStateError`. Every message is recorded in the server's
view with the opened plaintext as payload (what the server learns), or the ciphertext when it
could not be opened.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.messages import (
    CONTRIBUTION_ID_BYTES,
    TOKEN_HASH_BYTES,
    CoverShare,
    Message,
    ShareSubmission,
    decode,
    token_hash,
)
from fre_protocol.parties.base import Channel, Meter, Workers, chunks
from fre_protocol.parties.replay_filter import ReplayFilter
from primitives.errors import DecodeError, ProtocolStateError, VerificationError

#: Why a share without a valid token is refused (the token itself is never in a message).
NO_TOKEN = "share's token is not one of its tag's accepted phase-1 submissions"
#: Why a second share with one token is refused.
SPENT_TOKEN = "share's token was already used (one contribution per phase-1 submission)"


@dataclass(slots=True)
class Opened:
    """One received ciphertext after opening: the message, or the error that rejected it."""

    ciphertext: bytes
    plaintext: bytes | None
    message: Message | None
    error: Exception | None

    @property
    def payload(self) -> bytes:
        return self.plaintext if self.plaintext is not None else self.ciphertext

    @property
    def is_cover(self) -> bool:
        return isinstance(self.message, CoverShare)

    @property
    def type_name(self) -> str:
        if self.message is not None:
            return self.message.type_name
        return "sealed_payload" if self.plaintext is None else "unknown"


class SealedInbox:
    """Opens ciphertexts with the server's private key; remembers digests to refuse replays."""

    def __init__(self, *, name: str, channel: Channel, private_key: Any, workers: Workers, meter: Meter) -> None:
        self._name = name
        self._channel = channel
        self._private_key = private_key
        self._workers = workers
        self._meter = meter
        self._seen = ReplayFilter(16)

    def open_all(
        self, ciphertexts: Sequence[bytes], expected: type[Message] | tuple[type[Message], ...]
    ) -> list[Opened]:
        channel, key = self._channel, self._private_key

        def work(span: range) -> list[Opened]:
            t0 = time.perf_counter()
            out = []
            batch = [ciphertexts[j] for j in span]
            for c, plain in zip(batch, channel.try_open_many(key, batch), strict=True):
                if isinstance(plain, DecodeError):
                    out.append(Opened(c, None, None, plain))
                    continue
                try:
                    out.append(Opened(c, plain, decode(plain, expected), None))
                except DecodeError as exc:
                    out.append(Opened(c, plain, None, exc))
            self._meter.add(f"{self._name}.open", time.perf_counter() - t0, len(span))
            return out

        opened = [o for part in self._workers.map(work, chunks(len(ciphertexts), 1024), desc=f"{self._name}: open") for o in part]
        # Replays are checked in arrival order on one thread: the first copy wins.
        fresh = self._seen.add_many([hashlib.blake2b(o.ciphertext, digest_size=16).digest() for o in opened])
        for o, first in zip(opened, fresh.tolist(), strict=True):
            if not first:
                o.error = ProtocolStateError("replayed message: this ciphertext was already received")
                o.message = None
        return opened


class ShareBook:
    """A server's phase-2 shares, per released tag.

    ``keep_contributions=True`` keeps every share by contribution id, so any subset of them can
    be summed (what a validator or a dropped share on the other server needs). ``False`` keeps a
    running sum per tag and the ids it covers: the memory is one share per released tag, not one
    per user, and the sum over the whole set is exact (modular addition does not depend on the
    order). A request for a strict subset then cannot be answered and is refused.
    """

    def __init__(self, *, keep_contributions: bool = True) -> None:
        self.keep_contributions = keep_contributions
        # Contribution ids per tag at 16 bytes each (a set of bytes took ~100): they are what
        # grows with the number of contributors once the shares are running sums.
        self._ids: dict[bytes, ReplayFilter] = {}
        self._shares: dict[bytes, dict[bytes, npt.NDArray[np.uint64]]] = {}
        self._totals: dict[bytes, npt.NDArray[np.uint64]] = {}
        self._pending: dict[bytes, list[npt.NDArray[np.uint64]]] = {}

    def ids(self, tag: bytes) -> set[bytes]:
        """The contribution ids held for ``tag``, as a new set (built once per tag, when its
        aggregate is asked for)."""
        held = self._ids.get(tag)
        return set(held.entries()) if held is not None else set()

    def has(self, tag: bytes, contribution_id: bytes) -> bool:
        held = self._ids.get(tag)
        return held is not None and contribution_id in held

    def count(self, tag: bytes) -> int:
        held = self._ids.get(tag)
        return len(held) if held is not None else 0

    def add(self, tag: bytes, contribution_id: bytes, share: npt.NDArray[np.uint64]) -> None:
        """Keep one share; a contribution id already held for the tag is a ProtocolStateError."""
        if not self.add_many(tag, [contribution_id], [share])[0]:
            raise ProtocolStateError("duplicate contribution id for this tag")

    def add_many(
        self, tag: bytes, contribution_ids: Sequence[bytes], shares: Sequence[npt.NDArray[np.uint64]]
    ) -> npt.NDArray[np.bool_]:
        """Keep the shares whose id is new for ``tag`` (the first copy, in order, within the
        batch); True where a share was kept."""
        if any(len(c) != CONTRIBUTION_ID_BYTES for c in contribution_ids):
            raise ProtocolStateError(f"a contribution id is {CONTRIBUTION_ID_BYTES} bytes")
        fresh = self._ids.setdefault(tag, ReplayFilter(CONTRIBUTION_ID_BYTES)).add_many(contribution_ids)
        for cid, share, keep in zip(contribution_ids, shares, fresh.tolist(), strict=True):
            if not keep:
                continue
            if self.keep_contributions:
                self._shares.setdefault(tag, {})[cid] = share
            else:
                self._pending.setdefault(tag, []).append(share)
        return fresh

    def settle(self, sharing: Any) -> None:
        """Fold the shares added since the last call into the running sums (one reduction per
        tag and batch, not one per share)."""
        for tag, shares in self._pending.items():
            part = sharing.aggregate(np.stack(shares))
            old = self._totals.get(tag)
            self._totals[tag] = part if old is None else sharing.aggregate(np.stack([old, part]))
        self._pending.clear()

    def total(self, tag: bytes, ids: Sequence[bytes], *, sharing: Any) -> npt.NDArray[np.uint64]:
        """The sum of the shares of ``ids`` (all held for ``tag``)."""
        if self.keep_contributions:
            mine = self._shares[tag]
            return np.asarray(sharing.aggregate(np.stack([mine[c] for c in ids])), dtype=np.uint64)
        if sorted(set(ids)) != (self._ids[tag].entries() if tag in self._ids else []):
            raise ProtocolStateError(
                "this server keeps one running sum per tag: it can sum all of a tag's "
                f"{self.count(tag)} contributions, not a subset of {len(ids)}"
            )
        self.settle(sharing)
        return self._totals[tag].copy()


class TokenBook:
    """A server's contribution tokens (design §6.8): per released tag, the hashes H(t) of the
    phase-1 submissions S_syn counted for it, and the tokens already spent by a share.

    A share counts only with a token whose hash is in its own tag's set and that no share before
    it used; a token is spent by the first well-formed share that shows it, whatever its
    contribution id. So one phase-1 submission buys at most one phase-2 contribution, at each
    server."""

    def __init__(self) -> None:
        self._allowed: dict[bytes, ReplayFilter] = {}
        self._spent = ReplayFilter(TOKEN_HASH_BYTES)

    def allow(self, tag: bytes, hashes: Sequence[bytes]) -> None:
        """The token hashes of ``tag``'s accepted submissions (once per tag)."""
        if tag in self._allowed:
            raise ProtocolStateError("token hashes for this tag were already received")
        held = ReplayFilter(TOKEN_HASH_BYTES)
        held.add_many(list(hashes))
        self._allowed[tag] = held

    def known(self, tag: bytes) -> bool:
        return tag in self._allowed

    def count(self, tag: bytes) -> int:
        held = self._allowed.get(tag)
        return len(held) if held is not None else 0

    def valid(self, tag: bytes, hashes: Sequence[bytes]) -> npt.NDArray[np.bool_]:
        """True where a hash is one of ``tag``'s accepted submissions (spent or not)."""
        held = self._allowed.get(tag)
        if held is None:
            return np.zeros(len(hashes), dtype=bool)
        return held.contains_many(list(hashes))

    def spend(self, hashes: Sequence[bytes]) -> npt.NDArray[np.bool_]:
        """Spend a batch of tokens (by hash); True where one was unspent (the first copy wins)."""
        return self._spent.add_many(list(hashes))


def accept_shares(
    opened: Sequence[Opened],
    released: dict[bytes, int],
    book: ShareBook,
    *,
    sharing: Any,
    dim: int,
    meter: Meter,
    name: str,
    tokens: TokenBook,
) -> None:
    """Keep each opened ShareSubmission whose tag is released, whose token is an unspent one of
    the tag's accepted phase-1 submissions (``tokens``; else VerificationError, or
    ProtocolStateError when spent) and whose contribution id is new, after decoding the share
    (the sharing checks length and range: DecodeError); cover messages carry nothing and are
    skipped. Rejections are written into ``Opened.error``; nothing already stored is touched by
    a bad message."""
    t0 = time.perf_counter()
    # Decode first (a bad share must not claim its id), then keep the new ids of each tag in one
    # batch: the first copy of an id, in arrival order, wins.
    decoded: dict[bytes, list[tuple[Opened, bytes, npt.NDArray[np.uint64]]]] = {}
    checked: list[tuple[Opened, bytes, bytes, npt.NDArray[np.uint64]]] = []
    for o in opened:
        if o.error is not None or o.is_cover:
            continue
        msg = o.message
        assert isinstance(msg, ShareSubmission)
        try:
            if msg.tag not in released:
                raise ProtocolStateError("share for a tag that was not released (unknown tag)")
            share = sharing.decode_share(msg.share, dim)
            checked.append((o, msg.tag, token_hash(msg.token), share))
        except (DecodeError, ProtocolStateError) as exc:
            o.error = exc
    # Tokens: of the share's own tag, then unspent (in arrival order: the first copy spends it).
    hashes = [h for _, _, h, _ in checked]
    valid = np.zeros(len(checked), dtype=bool)
    by_tag: dict[bytes, list[int]] = {}
    for j, (_, tag, _, _) in enumerate(checked):
        by_tag.setdefault(tag, []).append(j)
    for tag, at in by_tag.items():
        valid[at] = tokens.valid(tag, [hashes[j] for j in at])
    good = np.flatnonzero(valid).tolist()
    unspent = tokens.spend([hashes[j] for j in good]).tolist()
    spendable = dict(zip(good, unspent, strict=True))
    for j, (o, tag, _, share) in enumerate(checked):
        if not valid[j]:
            o.error = VerificationError(NO_TOKEN)
        elif not spendable[j]:
            o.error = ProtocolStateError(SPENT_TOKEN)
        else:
            msg = o.message
            assert isinstance(msg, ShareSubmission)
            decoded.setdefault(tag, []).append((o, msg.contribution_id, share))
    n_ok = 0
    for tag, items in decoded.items():
        fresh = book.add_many(tag, [cid for _, cid, _ in items], [share for _, _, share in items])
        for (o, _, _), first in zip(items, fresh.tolist(), strict=True):
            if first:
                n_ok += 1
            else:
                o.error = ProtocolStateError("duplicate contribution id for this tag")
    book.settle(sharing)
    meter.add(f"{name}.decode_share", time.perf_counter() - t0, max(n_ok, 1))


__all__ = ["NO_TOKEN", "SPENT_TOKEN", "Opened", "SealedInbox", "ShareBook", "TokenBook", "accept_shares"]
