"""The labelled random streams of a run, and the one rule that makes every driver release the same.

Every secret draw of a run comes from ``seeds.secret(label)`` or a child of it: cryptographic in
normal mode, derived from the test seed in test mode (:class:`mechanism.seeds.SeedPlan`). The
rule: **a draw's label names what it is for and which users it serves, never when or where it
runs.** A stream that serves a chunk of users is labelled with that chunk's global index (the
chunks of ``ProtocolConfig.chunk_size`` users in user order), never with a window, a worker, a
task or a batch count; a stream that serves a whole party is labelled with the party. Then any
driver that plays the same users in other windows, processes or machines draws the same values,
and in test mode its release equals the in-process driver's bit for bit; only orders of delivery
differ, which the servers' modular sums and counts do not see.

Labels in use (``<j>``: a chunk index; children after ``/``):
"""

from __future__ import annotations

#: S_tag's VOPRF key (DeriveKeyPair seed in test mode).
VOPRF_KEY = "voprf/key"
#: A server's sealing key pair: ``channel/<role label>``.
CHANNEL_KEY = "channel/{role}"
#: Which users go offline between the phases (a fraction drawn per user, or per person).
DROPOUT = "dropout"
#: The proxy's shuffles (in-process: one child per forwarded batch, by the shuffler's own order).
PROXY_SHUFFLE = "proxy/shuffle"
#: The one shuffle of every held tag submission in a windowed run (design §6).
HELD_SHUFFLE = "proxy/phase1-held"
#: S_tag's own draws (proof nonces keyed by the elements they prove, ``evaluate/<digest>``; the
#: top-up noise ``topup``).
S_TAG = "S_tag"
#: S_tag's dummy user: ``plan``, ``tags``, ``token_hashes``, ``seals/chunk/<j>`` and, in a
#: windowed run, ``schedule`` (the window each dummy is sent in).
DUMMY = "S_tag/dummy"
#: The devices: ``prepare/<j>`` (blinds, seals), ``token/<j>`` (contribution tokens),
#: ``cover_token/<j>`` (cover's tokens), ``phase2/<j>`` (the j-th chunk of phase-2 participants in
#: user order: encoding, noise, shares) and ``padding/<j>`` (padding slots' inputs, user unit).
USERS = "users"


def channel_key(role_label: str) -> str:
    """The label of a server's sealing key pair."""
    return CHANNEL_KEY.format(role=role_label)


def prepare(chunk: int) -> str:
    """A chunk of devices' offline draws (blinds, seals), a child of :data:`USERS`."""
    return f"prepare/{chunk}"


def phase2(chunk: int) -> str:
    """The ``chunk``-th chunk of phase-2 participants (in user order), a child of :data:`USERS`."""
    return f"phase2/{chunk}"


__all__ = [
    "CHANNEL_KEY", "DROPOUT", "DUMMY", "HELD_SHUFFLE", "PROXY_SHUFFLE", "S_TAG", "USERS", "VOPRF_KEY",
    "channel_key", "phase2", "prepare",
]
