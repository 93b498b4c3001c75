"""The broadcast between the phases, as the parties hold it (design §6, issue 32).

S_syn releases the tags whose count reaches ⌈τ⌉ and sends two things:

* the **full list** (:class:`~fre_protocol.messages.ReleasedTags`, every released tag with its
  count) to S_tag over the servers' own channel, as it sends each tag's token hashes: S_tag needs
  every released tag (it accepts shares, sums and tops up per tag). The same list is published in
  ``release.json`` (the buckets, and the withheld tags' counts in the release's info);
* the **compact broadcast** (:class:`~fre_protocol.messages.CompactBroadcast`) to every user,
  through the proxy: the released tags and their counts in the round's broadcast encoding
  (component family ``broadcast``, default ``ribbon``; :mod:`primitives.compact`), built with the
  round's public broadcast seed (:func:`broadcast_seed`). A device answers "was my tag released,
  and with which count?" locally (:class:`HeardBroadcast`) and sizes its noise from that count
  (:class:`~fre_protocol.roles.noise_plan.CountSizing`): it never needs the list.

Both are functions of the DP outputs (released tags and counts) and of public values only (the
encoding's name and the public seed). A compact encoding answers a count for a fraction 2^-w of
unreleased tags (w-bit fingerprints): such a device sends a real share for its unreleased tag,
which both servers refuse as they refuse any share of an unreleased tag (it reaches no sum, no
count and no published output; :func:`~fre_protocol.roles.server_common.accept_shares`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

from fre_protocol.components import DEFAULT_COMPONENTS
from fre_protocol.messages import CompactBroadcast, decode_as
from primitives import registry
from primitives.compact.broadcast import BroadcastEncoding, LoadedBroadcast
from primitives.errors import DecodeError

#: The broadcast encoding when a run names none (component family ``broadcast``; its default is
#: stated once, in :data:`fre_protocol.components.DEFAULT_COMPONENTS`).
DEFAULT_BROADCAST = DEFAULT_COMPONENTS["broadcast"]

#: Loads timed per heard broadcast (their median is what one device pays to load it).
_LOAD_TIMINGS = 5

#: Domain of :func:`broadcast_seed`.
_SEED_DOMAIN = b"fre-e2t/broadcast-seed/v1\x00"


def broadcast_seed(public_seed: bytes) -> bytes:
    """The round's broadcast seed: SHA-256 of a fixed domain and the round's public seed (the one
    in every transcript header and round document). Public, fixed before any data is seen, so it
    is the same in neighbouring rounds; the compact builder's seed search starts from it."""
    return hashlib.sha256(_SEED_DOMAIN + bytes(public_seed)).digest()


def encoding_name(components: Mapping[str, str] | None) -> str:
    """The broadcast encoding a run's component names choose (the default where none does)."""
    return (components or {}).get("broadcast", DEFAULT_BROADCAST)


def encoding(name: str) -> BroadcastEncoding:
    """The registered broadcast encoding ``name`` (UnknownComponentError names the known ones)."""
    enc: BroadcastEncoding = registry.create("broadcast", name)
    return enc


def build_message(released: Mapping[bytes, int], enc: BroadcastEncoding, seed: bytes) -> bytes:
    """S_syn's CompactBroadcast of ``released`` (tag → count) in encoding ``enc`` with the public
    ``seed``: deterministic, so anyone holding the list and the seed rebuilds the same bytes."""
    return CompactBroadcast(
        encoding=enc.name, max_count=max(released.values(), default=0), body=enc.build(released, seed)
    ).encode()


class HeardBroadcast:
    """The compact broadcast as a device holds it: ``query(tag)`` its count or None, locally.

    ``expected``: the encoding the round's public choice names; a broadcast in another is refused
    (DecodeError). Queries are timed (``query_seconds``, ``queries``) so a driver can meter what
    one device pays; answers are kept per tag, since in this simulation one loaded broadcast
    stands for every device's identical copy."""

    def __init__(self, message: bytes, expected: BroadcastEncoding | str | None = None) -> None:
        enc = expected if isinstance(expected, BroadcastEncoding) else None
        want = enc.name if enc is not None else expected
        times = []
        for _ in range(_LOAD_TIMINGS):
            t0 = time.perf_counter()
            msg = decode_as(message, CompactBroadcast)
            if want is not None and msg.encoding != want:
                raise DecodeError(f"broadcast encoding must be {want!r} (the round's), got {msg.encoding!r}")
            enc = enc if enc is not None else encoding(msg.encoding)
            loaded: LoadedBroadcast = enc.load(msg.body)
            times.append(time.perf_counter() - t0)
        self.message = bytes(message)
        self.encoding = msg.encoding
        self.max_count = int(msg.max_count)
        self.loaded = loaded
        # What one device pays, once: the median of a few loads of the same bytes (one timing
        # on a busy machine is mostly its noise).
        self.load_seconds = sorted(times)[len(times) // 2]
        self.query_seconds = 0.0
        self.queries = 0
        self._answers: dict[bytes, int | None] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped to another process as its bytes; loaded again there.
        return (HeardBroadcast, (self.message, self.encoding))

    @property
    def size(self) -> int:
        """Bytes a device downloads (the whole CompactBroadcast)."""
        return len(self.message)

    @property
    def false_positive_rate(self) -> float:
        return float(self.loaded.false_positive_rate)

    def query(self, tag: bytes | None) -> int | None:
        """The count the broadcast gives ``tag`` (None: not released, or no tag)."""
        if tag is None:
            return None
        try:
            return self._answers[tag]
        except KeyError:
            pass
        t0 = time.perf_counter()
        answer = self.loaded.query(tag)
        self.query_seconds += time.perf_counter() - t0
        self.queries += 1
        self._answers[tag] = answer
        return answer

    def __contains__(self, tag: object) -> bool:
        return isinstance(tag, bytes) and self.query(tag) is not None

    def __len__(self) -> int:
        return len(self.loaded)

    def meter(self, meter: Any) -> None:
        """Add what hearing cost to ``meter`` (each device loads once and queries its own tag):
        ``user.broadcast_load`` once, ``user.broadcast_query`` per distinct tag queried."""
        meter.add("user.broadcast_load", self.load_seconds, 1)
        if self.queries:
            meter.add("user.broadcast_query", self.query_seconds, self.queries)


class DeviceSigmas(Mapping[bytes, float]):
    """Each device's σ_int from its own count: ``sigmas[tag]`` is the noise plan's σ for the count
    the broadcast gives ``tag`` (:class:`~fre_protocol.roles.noise_plan.CountSizing`); a tag the
    broadcast does not release is not a key. What :func:`~fre_protocol.roles.user.share_plaintexts`
    takes, in place of the servers' per-tag plan."""

    def __init__(self, heard: HeardBroadcast, sizing: Any) -> None:
        self.heard, self.sizing = heard, sizing
        self._memo: dict[int, float] = {}

    def __getitem__(self, tag: bytes) -> float:
        count = self.heard.query(tag)
        if count is None:
            raise KeyError(tag)
        if count not in self._memo:
            self._memo[count] = float(self.sizing.sigma(count))
        return self._memo[count]

    def __iter__(self) -> Iterator[bytes]:
        return iter(())  # not enumerable: a device knows its own tag only

    def __len__(self) -> int:
        return len(self.heard)


__all__ = [
    "DEFAULT_BROADCAST", "DeviceSigmas", "HeardBroadcast", "broadcast_seed", "build_message", "encoding",
    "encoding_name",
]
