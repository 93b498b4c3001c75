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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.messages import (
    CONTRIBUTION_ID_BYTES,
    TOKEN_HASH_BYTES,
    AcceptedContributions,
    CoverShare,
    Message,
    ShareSubmission,
    decode,
    decode_as,
    message_type_name,
    token_hash,
)
from fre_protocol.roles.base import PHASE2, Channel, Meter, Row, Workers, chunks, status_of
from fre_protocol.roles.replay_filter import ReplayFilter
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
    order). A request for a strict subset then cannot be answered and is refused, so a windowed
    driver makes both servers agree after each window (:meth:`settle`): the shares added since
    are kept as received (a few bytes a coordinate) until then, and those the other server does
    not hold are taken out of the sum and out of the ids.
    """

    def __init__(self, *, keep_contributions: bool = True) -> None:
        self.keep_contributions = keep_contributions
        # Contribution ids per tag at 16 bytes each (a set of bytes took ~100): they are what
        # grows with the number of contributors once the shares are running sums.
        self._ids: dict[bytes, ReplayFilter] = {}
        self._shares: dict[bytes, dict[bytes, npt.NDArray[np.uint64]]] = {}
        self._totals: dict[bytes, npt.NDArray[np.uint64]] = {}
        self._pending: dict[bytes, list[npt.NDArray[np.uint64]]] = {}
        # Running sums only: the shares (as received) added since the last settle, and the ids
        # taken out of the sum because the other server did not hold them.
        self._unsettled: dict[bytes, dict[bytes, bytes]] = {}
        self._dropped: dict[bytes, set[bytes]] = {}

    def ids(self, tag: bytes) -> set[bytes]:
        """The contribution ids held for ``tag``, as a new set (built once per tag, when its
        aggregate is asked for)."""
        held = self._ids.get(tag)
        return set(held.entries()) - self._dropped.get(tag, set()) if held is not None else set()

    def has(self, tag: bytes, contribution_id: bytes) -> bool:
        held = self._ids.get(tag)
        return held is not None and contribution_id in held and contribution_id not in self._dropped.get(tag, ())

    def count(self, tag: bytes) -> int:
        held = self._ids.get(tag)
        return len(held) - len(self._dropped.get(tag, ())) if held is not None else 0

    def add(self, tag: bytes, contribution_id: bytes, share: npt.NDArray[np.uint64]) -> None:
        """Keep one share; a contribution id already held for the tag is a ProtocolStateError."""
        if not self.add_many(tag, [contribution_id], [share])[0]:
            raise ProtocolStateError("duplicate contribution id for this tag")

    def add_many(
        self, tag: bytes, contribution_ids: Sequence[bytes], shares: Sequence[npt.NDArray[np.uint64]],
        received: Sequence[bytes] | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Keep the shares whose id is new for ``tag`` (the first copy, in order, within the
        batch); True where a share was kept. ``received``: each share as it came (kept until
        :meth:`settle` under running sums)."""
        if any(len(c) != CONTRIBUTION_ID_BYTES for c in contribution_ids):
            raise ProtocolStateError(f"a contribution id is {CONTRIBUTION_ID_BYTES} bytes")
        fresh = self._ids.setdefault(tag, ReplayFilter(CONTRIBUTION_ID_BYTES)).add_many(contribution_ids)
        raw = received if received is not None else [None] * len(contribution_ids)
        for cid, share, data, keep in zip(contribution_ids, shares, raw, fresh.tolist(), strict=True):
            if not keep:
                continue
            if self.keep_contributions:
                self._shares.setdefault(tag, {})[cid] = share
            else:
                self._pending.setdefault(tag, []).append(share)
                if data is not None:
                    self._unsettled.setdefault(tag, {})[cid] = data
        return fresh

    def fold(self, sharing: Any) -> None:
        """Fold the shares added since the last call into the running sums (one reduction per
        tag and batch, not one per share)."""
        for tag, shares in self._pending.items():
            part = sharing.aggregate(np.stack(shares))
            old = self._totals.get(tag)
            self._totals[tag] = part if old is None else sharing.aggregate(np.stack([old, part]))
        self._pending.clear()

    def unsettled(self) -> dict[bytes, list[bytes]]:
        """Running sums: the ids added since the last :meth:`settle`, sorted, per tag."""
        return {tag: sorted(held) for tag, held in sorted(self._unsettled.items()) if held}

    def settle(self, common: Mapping[bytes, Collection[bytes]], *, sharing: Any, dim: int) -> dict[bytes, list[bytes]]:
        """Running sums: of the ids added since the last call, keep those in ``common`` (per tag)
        and take the others out of the sum and the ids (their shares as received are decoded
        again and subtracted). Returns the kept ids per tag, sorted."""
        self.fold(sharing)
        kept: dict[bytes, list[bytes]] = {}
        for tag, held in self._unsettled.items():
            mine = common.get(tag, ())
            kept[tag] = sorted(c for c in held if c in mine)
            gone = [held[c] for c in held if c not in mine]
            if gone:
                self._dropped.setdefault(tag, set()).update(c for c in held if c not in mine)
                part = sharing.aggregate(np.stack([sharing.decode_share(g, dim) for g in gone]))
                self._totals[tag] = sharing.aggregate(np.stack([self._totals[tag], _negated(part, sharing)]))
        self._unsettled.clear()
        return kept

    def total(self, tag: bytes, ids: Sequence[bytes], *, sharing: Any) -> npt.NDArray[np.uint64]:
        """The sum of the shares of ``ids`` (all held for ``tag``)."""
        if self.keep_contributions:
            mine = self._shares[tag]
            return np.asarray(sharing.aggregate(np.stack([mine[c] for c in ids])), dtype=np.uint64)
        if set(ids) != self.ids(tag):
            raise ProtocolStateError(
                "this server keeps one running sum per tag: it can sum all of a tag's "
                f"{self.count(tag)} contributions, not a subset of {len(ids)}"
            )
        self.fold(sharing)
        return self._totals[tag].copy()


def _negated(values: npt.NDArray[np.uint64], sharing: Any) -> npt.NDArray[np.uint64]:
    """``−values`` in the sharing's ring (Z_m; m = 2^64 wraps by itself)."""
    m = int(sharing.modulus)
    if m == 1 << 64:
        return np.uint64(0) - values
    return (np.uint64(m) - values) % np.uint64(m)


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
    decoded: dict[bytes, list[tuple[Opened, ShareSubmission, npt.NDArray[np.uint64]]]] = {}
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
            decoded.setdefault(tag, []).append((o, msg, share))
    n_ok = 0
    for tag, items in decoded.items():
        fresh = book.add_many(
            tag, [m.contribution_id for _, m, _ in items], [share for _, _, share in items], [m.share for _, m, _ in items]
        )
        for (o, _, _), first in zip(items, fresh.tolist(), strict=True):
            if first:
                n_ok += 1
            else:
                o.error = ProtocolStateError("duplicate contribution id for this tag")
    book.fold(sharing)
    meter.add(f"{name}.decode_share", time.perf_counter() - t0, max(n_ok, 1))


def settle_shares(
    book: ShareBook, named: Sequence[bytes], *, sharing: Any, dim: int, view: str, sender: str
) -> tuple[list[bytes], list[Row]]:
    """A server keeping running sums settles the contributions added since the last window: of
    its own, it keeps those the other server names (``named``: AcceptedContributions, one per
    tag) and takes the rest out of its sum. Returns the kept ones (AcceptedContributions per tag)
    and the rows of its view (a malformed message is refused, typed, and names nothing)."""
    common: dict[bytes, set[bytes]] = {}
    rows: list[Row] = []
    for data in named:
        error: Exception | None = None
        try:
            msg = decode_as(data, AcceptedContributions)
            common[msg.tag] = set(msg.contribution_ids)
        except DecodeError as exc:
            error = exc
        rows.append((view, PHASE2, sender, view, message_type_name(data), data, status_of(error)))
    kept = book.settle(common, sharing=sharing, dim=dim)
    return [AcceptedContributions(tag=t, contribution_ids=tuple(ids)).encode() for t, ids in kept.items()], rows


__all__ = ["NO_TOKEN", "SPENT_TOKEN", "Opened", "SealedInbox", "ShareBook", "TokenBook", "accept_shares", "settle_shares"]
