"""The unit of privacy and contribution bounding when one user holds several texts (design §4.6,
paper App. D).

Fre-E2T's analysis protects one *contribution*: one point added to or removed from one bucket.
When each user holds one text, a contribution is a user. When a user holds several, the
mechanism only protects the user if their influence is bounded: each user contributes to at most
``cap = c`` buckets, with at most one text per bucket, and the c bucket releases compose to
(c·ε, c·δ) per user (:func:`~mechanism.accounting.multi_text_guarantee`).

Which text stands for a user in a bucket: **one of theirs chosen uniformly at random**, not their
mean. The chosen contribution is then an actual text of the corpus, so every single-text lemma
(Lemma 1's counts, Lemma 2's probabilistic sensitivity for two points on the shifted grid, the
clip bound, the SSP argument that a released centroid is far from every rare text) applies to it
verbatim; a mean would be a new point whose Lemma 2 argument and inversion target differ from the
paper's. Which buckets, when a user has more than c: c of their distinct buckets uniformly at
random. Both choices depend only on the user's own texts and their own randomness, as a device
would make them.

Contributions have *slots*: user u owns slots ``u·c … u·c + c − 1`` and fills the first of them
with its chosen contributions in the order of its random bucket priorities. A slot's sampling coin
is entry ``slot`` of :func:`~mechanism.fre_e2t.sample_coins` over all ``n_users·c`` slots, which
is what the distributed protocol's padded users draw; with one text per user and c = 1 the slots
are the rows and everything is as before.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from mechanism.accounting import HISTOGRAM_RELEASE, multi_text_guarantee
from mechanism.grouping import group_buckets
from mechanism.ledger import PrivacyLedger
from mechanism.seeds import SeedPlan
from primitives.analytic_gaussian import agm_multiplier
from primitives.errors import InvalidInputError, InvalidParameterError

#: Secret stream of the users' choices (which text per bucket, which buckets).
CONTRIBUTION_CHOICE_LABEL = "contributions/choice"
#: Secret stream of the Gaussian noise of :func:`estimate_cap`'s histogram.
CAP_ESTIMATE_LABEL = "contributions/cap-estimate"

UnitKind = Literal["text", "user"]


def check_cap(cap: object) -> int:
    """``cap`` as an int ≥ 1, or a typed error naming it."""
    if isinstance(cap, bool) or not isinstance(cap, int | np.integer) or int(cap) < 1:
        raise InvalidParameterError(f"cap (buckets per user, c) must be an integer >= 1, got {cap!r}")
    return int(cap)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyUnit:
    """Who the (ε, δ) protects. ``kind="text"``: every text counts as its own user (the input named
    no user field). ``kind="user"``: texts are grouped by ``user_field`` and each user contributes
    to at most ``cap`` buckets; ``extra_epsilon``/``extra_delta`` are what choosing c from the data
    cost (:func:`estimate_cap`), 0 when c came from public information."""

    kind: UnitKind = "text"
    cap: int = 1
    user_field: str | None = None
    extra_epsilon: float = 0.0
    extra_delta: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("text", "user"):
            raise InvalidParameterError(f"kind must be 'text' or 'user', got {self.kind!r}")
        object.__setattr__(self, "cap", check_cap(self.cap))
        if self.kind == "text" and (self.cap != 1 or self.user_field is not None):
            raise InvalidParameterError(
                f"a text unit has cap 1 and no user field, got cap={self.cap}, user_field={self.user_field!r}"
            )
        for name in ("extra_epsilon", "extra_delta"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise InvalidParameterError(f"{name} must be a finite number >= 0, got {value!r}")

    def statement(self, per_text: tuple[float, float], per_user: tuple[float, float]) -> str:
        """One sentence for summaries, ledgers and reports: whom the guarantee protects."""
        epsilon, delta = per_text
        if self.kind == "text":
            return (
                f"each text is treated as a separate user: (epsilon={epsilon:.6g}, delta={delta:.3g}) "
                "protects one text, not a person who wrote several (name the user column to protect people)"
            )
        extra = (
            f", including ({self.extra_epsilon:.6g}, {self.extra_delta:.3g}) spent choosing c from the data"
            if self.extra_epsilon or self.extra_delta
            else ""
        )
        return (
            f"texts grouped by user field {self.user_field!r}; each user contributes to at most "
            f"c={self.cap} buckets, one text per bucket: (epsilon={per_user[0]:.6g}, delta={per_user[1]:.3g}) "
            f"per user, from ({epsilon:.6g}, {delta:.3g}) per contribution{extra}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "cap": self.cap,
            "user_field": self.user_field,
            "extra_epsilon": self.extra_epsilon,
            "extra_delta": self.extra_delta,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyUnit:
        try:
            return cls(
                kind=data.get("kind", "text"),
                cap=data.get("cap", 1),
                user_field=data.get("user_field"),
                extra_epsilon=float(data.get("extra_epsilon", 0.0)),
                extra_delta=float(data.get("extra_delta", 0.0)),
            )
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"malformed privacy unit record {dict(data)!r}: {exc}") from None


TEXT_UNIT = PrivacyUnit()


def check_users_for(unit: PrivacyUnit, users: object) -> None:
    """``users`` (one label per row) comes exactly with a user unit: a typed error otherwise."""
    if not isinstance(unit, PrivacyUnit):
        raise InvalidParameterError(f"unit must be a PrivacyUnit, got {type(unit).__name__}")
    if (unit.kind == "user") != (users is not None):
        raise InvalidParameterError(
            "users (one label per row) must be given exactly when the unit of privacy is 'user', "
            f"got unit kind {unit.kind!r} and users {'given' if users is not None else 'None'}"
        )


def per_user_guarantee(ledger: PrivacyLedger, unit: PrivacyUnit) -> tuple[float, float, str]:
    """(ε, δ) per user of a release whose ledger is per contribution, and the rule used.

    Terms that act bucket by bucket with independent randomness (Lemma 1's thresholded counts,
    Lemma 2's failure, the centroid noise) form a product mechanism, and one user changes at most
    c of its coordinates: basic composition, (c·ε, c·δ) (paper App. D). S_syn's histogram view in
    the protocol is not a product: its TSDLap dummies are per count level and shared by all
    buckets, so a user's c contributions (real or padding slots) are a group of c slot-level
    changes: group privacy, (c·ε_h, δ_h·(e^{c·ε_h} − 1)/(e^{ε_h} − 1)), cheap because δ_h is tiny.
    What choosing c from the data cost (``unit.extra_*``) adds on top.
    """
    c = unit.cap
    if not math.isfinite(ledger.epsilon):
        return math.inf, ledger.delta, "non-DP reference"
    if c == 1:
        eps, delta, rule = ledger.epsilon, ledger.delta, "one contribution per user"
    elif ledger.has_term(HISTOGRAM_RELEASE):
        hist = ledger.term(HISTOGRAM_RELEASE)
        eps_h, delta_h = multi_text_guarantee(hist.epsilon, hist.delta, points=c)
        eps = eps_h + c * max(0.0, ledger.epsilon - hist.epsilon)
        delta = delta_h + c * max(0.0, ledger.delta - hist.delta)
        rule = (
            f"group privacy over c={c} slots for {HISTOGRAM_RELEASE}; c-fold basic composition of the "
            "per-bucket terms"
        )
    else:
        eps, delta = multi_text_guarantee(ledger.epsilon, ledger.delta, cap=c)
        rule = f"c-fold basic composition over c={c} distinct buckets"
    return eps + unit.extra_epsilon, min(1.0, delta + unit.extra_delta), rule


def with_unit(ledger: PrivacyLedger, unit: PrivacyUnit) -> PrivacyLedger:
    """``ledger`` stating whom it protects: its (ε, δ) per contribution and the composed per-user
    guarantee (:func:`per_user_guarantee`) under ``unit``."""
    eps_u, delta_u, rule = per_user_guarantee(ledger, unit)
    record = unit.to_dict() | {
        "epsilon": eps_u,
        "delta": delta_u,
        "rule": rule,
        "statement": unit.statement((ledger.epsilon, ledger.delta), (eps_u, delta_u)),
    }
    return dataclasses.replace(ledger, unit=record)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContributionPlan:
    """Which rows contribute, and in which slot. ``rows[j]`` is the input row of contribution j,
    ``slots[j]`` its slot (owner ``slots[j] // cap``), ordered by slot; ``owners[i]`` is the dense
    user index of input row i (users numbered in order of first appearance)."""

    rows: npt.NDArray[np.intp]
    slots: npt.NDArray[np.int64]
    owners: npt.NDArray[np.int64]
    n_users: int
    cap: int

    @property
    def n_slots(self) -> int:
        return self.n_users * self.cap

    @property
    def slot_rows(self) -> npt.NDArray[np.intp]:
        """Row of every slot, −1 for a padding slot (a user with fewer than c buckets)."""
        out = np.full(self.n_slots, -1, dtype=np.intp)
        out[self.slots] = self.rows
        return out

    def texts_per_user(self) -> npt.NDArray[np.int64]:
        """How many input rows each user holds (operator-private: it reads the data)."""
        return np.bincount(self.owners, minlength=self.n_users).astype(np.int64)


def dense_users(user_ids: npt.ArrayLike, n: int) -> tuple[npt.NDArray[np.int64], int]:
    """User ids (any hashable labels) → dense indices 0.. in order of first appearance."""
    ids = np.asarray(user_ids)
    if ids.ndim != 1 or ids.shape[0] != n:
        raise InvalidInputError(
            f"user_ids must have one entry per row ({n}), got shape {tuple(ids.shape)}"
        )
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(first.shape[0], dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.shape[0], dtype=np.int64)
    return rank[inverse.reshape(-1)], int(first.shape[0])


def one_text_per_user(n: int) -> ContributionPlan:
    """The plan of a corpus without a user field: row i is user i's only contribution."""
    idx = np.arange(n, dtype=np.int64)
    return ContributionPlan(rows=idx.astype(np.intp), slots=idx, owners=idx, n_users=n, cap=1)


def bound_contributions(
    user_ids: npt.ArrayLike,
    buckets: npt.NDArray[np.int64],
    cap: int,
    seeds: SeedPlan,
) -> ContributionPlan:
    """Each user keeps at most ``cap`` distinct buckets, one text per bucket, chosen uniformly.

    ``buckets`` is the (n, k) grid index of every row (:meth:`mechanism.grid.PublicGrid.bucket_indices`).
    The choices are drawn from ``seeds.secret(CONTRIBUTION_CHOICE_LABEL)``: two uniform
    priorities per row, the first choosing the text of each (user, bucket) (the smallest wins),
    the second, that text's, ranking the user's buckets (the ``cap`` smallest are kept, in that
    order). Every draw belongs to a row, never to a group number (which depends on every user's
    buckets), so with the same seed a user's choices do not move when another user's texts change:
    neighbouring populations then differ in that user's slots only.
    """
    cap = check_cap(cap)
    b = np.asarray(buckets)
    if b.ndim != 2 or not np.issubdtype(b.dtype, np.integer):
        raise InvalidInputError(f"buckets must be an (n, k) integer array, got {b.dtype} {tuple(b.shape)}")
    n = int(b.shape[0])
    owners, n_users = dense_users(user_ids, n)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return ContributionPlan(rows=empty.astype(np.intp), slots=empty, owners=empty, n_users=0, cap=cap)
    rng = seeds.secret(CONTRIBUTION_CHOICE_LABEL)
    text_priority = rng.uniform(n)
    row_bucket_priority = rng.uniform(n)
    _, group, _ = group_buckets(np.column_stack([owners, b.astype(np.int64)]))
    n_groups = int(group.max()) + 1
    # The text of each (user, bucket): the row of smallest priority in its group.
    by_group = np.lexsort((text_priority, group))
    starts = np.flatnonzero(np.r_[True, group[by_group][1:] != group[by_group][:-1]])
    chosen_row = by_group[starts]  # one per group, groups in increasing number
    group_owner = owners[chosen_row]
    # Which buckets: each group's priority is its chosen text's; a user keeps its cap smallest.
    bucket_priority = row_bucket_priority[chosen_row]
    by_user = np.lexsort((bucket_priority, group_owner))
    owner_sorted = group_owner[by_user]
    first_of_user = np.flatnonzero(np.r_[True, owner_sorted[1:] != owner_sorted[:-1]])
    run_start = np.repeat(first_of_user, np.diff(np.r_[first_of_user, n_groups]))
    rank = np.arange(n_groups) - run_start
    keep = rank < cap
    rows = chosen_row[by_user][keep].astype(np.intp)
    slots = owner_sorted[keep] * cap + rank[keep]
    return ContributionPlan(rows=rows, slots=slots.astype(np.int64), owners=owners, n_users=n_users, cap=cap)


@dataclass(frozen=True, slots=True, kw_only=True)
class CapEstimate:
    """c chosen from a DP histogram of texts per user, and what it cost."""

    cap: int
    quantile: float
    epsilon: float
    delta: float
    noisy_histogram: tuple[float, ...]  # bins 1 … max_cap (the last counts "max_cap or more")

    def unit(self, user_field: str) -> PrivacyUnit:
        return PrivacyUnit(
            kind="user", cap=self.cap, user_field=user_field, extra_epsilon=self.epsilon, extra_delta=self.delta
        )


def estimate_cap(
    texts_per_user: npt.ArrayLike,
    *,
    epsilon: float,
    delta: float,
    seeds: SeedPlan,
    quantile: float = 0.9,
    max_cap: int = 32,
) -> CapEstimate:
    """Choose c as the smallest value whose (noisy) share of users holding at most c texts
    reaches ``quantile``.

    The histogram of min(texts, max_cap) over users has L2 sensitivity 1 when one user is added
    or removed (one bin moves by one), so the analytic Gaussian with σ = m*(ε, δ) makes it
    (ε, δ)-DP (design §4.3); c is post-processing. This (ε, δ) adds to the per-user guarantee of
    the release (basic composition), which :meth:`CapEstimate.unit` records. Choosing c from
    public information instead (a product limit, a published distribution) costs nothing: pass it
    as ``PrivacyUnit(kind="user", cap=c, ...)`` directly.
    """
    counts = np.asarray(texts_per_user)
    if counts.ndim != 1 or counts.size == 0 or not np.issubdtype(counts.dtype, np.integer) or counts.min() < 1:
        raise InvalidInputError("texts_per_user must be a non-empty 1-D array of integers >= 1")
    if not 0 < quantile < 1:
        raise InvalidParameterError(f"quantile must be in (0, 1), got {quantile!r}")
    max_cap = check_cap(max_cap)
    sigma = agm_multiplier(epsilon, delta)
    hist = np.bincount(np.minimum(counts, max_cap) - 1, minlength=max_cap).astype(np.float64)
    noisy = hist + sigma * np.asarray(seeds.secret(CAP_ESTIMATE_LABEL).normal(max_cap), dtype=np.float64)
    clipped = np.maximum(noisy, 0.0)
    total = clipped.sum()
    cdf = np.cumsum(clipped) / total if total > 0 else np.ones(max_cap)
    cap = int(np.argmax(cdf >= quantile - 1e-12)) + 1
    return CapEstimate(
        cap=cap, quantile=quantile, epsilon=float(epsilon), delta=float(delta), noisy_histogram=tuple(noisy.tolist())
    )
