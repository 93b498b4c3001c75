"""Contribution slots: the protocol's population when one user holds several texts (design §4.6).

Under a user unit with cap c, user u owns slots u·c … u·c + c − 1
(:func:`mechanism.contributions.bound_contributions`), and its device plays every slot as the
single-text protocol plays a user: a blind request, with the slot's coin a tag submission, and in
phase 2 a share pair or cover. A slot filled with one of the user's chosen texts carries that
text's embedding and bucket encoding. A padding slot (the user has fewer than c distinct buckets)
carries a fresh random VOPRF input from a padding domain that no bucket encoding can equal, and a
zero embedding: its tag is pseudorandom and unique, so it lands at count 1 at S_syn, never
reaches a release floor of 2 or more, and in phase 2 the slot sends cover. The proxy and the
servers see the same traffic from every user whatever its data: c blind requests, Bin(c, p_s)
submissions, c share pairs.

Coins are per slot (entry s of :func:`mechanism.fre_e2t.sample_coins` over all n_users·c slots in
test mode), exactly as the mechanism draws them, which is what keeps the two paths equivalent.
With a text unit the slots are the rows and nothing differs from the single-text protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.inputs import EmbeddingShards, release_pages, take_rows
from fre_protocol.roles.base import chunks
from mechanism.contributions import TEXT_UNIT, PrivacyUnit, bound_contributions
from mechanism.grid import PublicGrid, encode_buckets
from mechanism.seeds import SeedPlan
from primitives.errors import ProtocolStateError
from primitives.randomness import RandomSource

#: Prefix of a padding slot's VOPRF input. With the 32 random bytes after it the input is 52
#: bytes long, not a multiple of 8: a bucket encoding is k signed 64-bit integers, so the two
#: domains never meet.
PADDING_DOMAIN = b"fre-e2t/padding-slot"
PADDING_RANDOM_BYTES = 32
#: Child of the users' secret stream a chunk of slots draws its padding inputs from.
PADDING_LABEL = "padding"


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotLayout:
    """Which input row every entry of the protocol's population carries. ``slot_rows[s]`` is the
    row of slot s, −1 for a padding slot; None under a text unit (slot i is row i)."""

    unit: PrivacyUnit
    n_texts: int
    n_users: int
    slot_rows: npt.NDArray[np.intp] | None = None

    @classmethod
    def per_text(cls, n: int) -> SlotLayout:
        return cls(unit=TEXT_UNIT, n_texts=n, n_users=n)

    @classmethod
    def bound(
        cls, x: npt.NDArray[np.floating[Any]] | EmbeddingShards, users: npt.ArrayLike, unit: PrivacyUnit,
        grid: PublicGrid, seeds: SeedPlan,
    ) -> SlotLayout:
        """Each user's c slots, filled as the mechanism fills them (same choices, same seeds). Every
        row's bucket is computed block by block (shards one at a time); no row is kept."""
        blocks = x.blocks() if isinstance(x, EmbeddingShards) else [x]
        buckets = np.concatenate([grid.bucket_indices(b) for b in blocks])
        release_pages(x)  # the pass read every row; a streaming driver reads them again per window
        plan = bound_contributions(users, buckets, unit.cap, seeds)
        return cls(unit=unit, n_texts=int(x.shape[0]), n_users=plan.n_users, slot_rows=plan.slot_rows)

    @property
    def cap(self) -> int:
        return self.unit.cap

    @property
    def n_slots(self) -> int:
        return self.n_users * self.cap

    @property
    def n_padding(self) -> int:
        return 0 if self.slot_rows is None else int(np.count_nonzero(self.slot_rows < 0))

    def rows_of(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The input rows of real ``slots`` (the slots themselves under a text unit)."""
        if self.slot_rows is None:
            return slots
        rows = self.slot_rows[slots]
        if np.any(rows < 0):
            raise ProtocolStateError("a padding slot has no input row (it never contributes)")
        return rows.astype(np.int64)

    def per_slot(self, per_user: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """A flag per user (e.g. offline in phase 2) as a flag per slot: a device's slots share it."""
        return per_user if self.cap == 1 else np.repeat(per_user, self.cap)

    def inputs(
        self, x: npt.NDArray[np.floating[Any]] | EmbeddingShards, span: range, grid: PublicGrid, rng: RandomSource, chunk_size: int
    ) -> tuple[npt.NDArray[np.floating[Any]], list[bytes]]:
        """Slots ``span``'s embeddings (zero for padding) and VOPRF inputs, under a user unit
        (a text unit's slots are its rows). ``span`` starts on a chunk boundary; chunk j of slots
        draws its padding inputs from ``rng.child("padding/j")``, 32 bytes for each of its slots
        taken by position, so a slot's input is its own draw."""
        if self.slot_rows is None:
            raise ProtocolStateError("a text unit has no slot layout: its slots are the input rows")
        slot_rows = self.slot_rows[span.start : span.stop]
        real = np.flatnonzero(slot_rows >= 0)
        out = np.zeros((len(span), x.shape[1]), dtype=x.dtype)
        out[real] = take_rows(x, slot_rows[real])
        encodings: list[bytes] = [b""] * len(span)
        if real.size:
            for j, encoding in zip(real.tolist(), encode_buckets(grid.bucket_indices(out[real])), strict=True):
                encodings[j] = encoding
        for chunk in chunks(len(span), chunk_size):
            padding = [j for j in chunk if slot_rows[j] < 0]
            if not padding:
                continue
            label = f"{PADDING_LABEL}/{(span.start + chunk.start) // chunk_size}"
            draws = rng.child(label).random_bytes(PADDING_RANDOM_BYTES * len(chunk))
            for j in padding:
                at = PADDING_RANDOM_BYTES * (j - chunk.start)
                encodings[j] = PADDING_DOMAIN + draws[at : at + PADDING_RANDOM_BYTES]
        return out, encodings


__all__ = ["PADDING_DOMAIN", "PADDING_LABEL", "PADDING_RANDOM_BYTES", "SlotLayout"]
