"""Where each run's randomness comes from, shared by the mechanism and the protocol.

A :class:`SeedPlan` holds the *public seed* (projection matrix, grid offsets: every party
recomputes them) and, only in explicit test mode, a *test seed* from which coins, keys, blinds and
noise are derived. Without a test seed every secret draw is cryptographic. The labels below are a
contract: the centralized mechanism and the distributed protocol draw the same coins from the same
labelled stream, which is what makes their outputs comparable in test mode.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

PUBLIC_LABEL = "public"
COINS_LABEL = "coins"  # uniform(N) < p_s, users in input order
CENTROID_NOISE_LABEL = "noise/centroid"


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedPlan:
    public_seed: bytes
    test_seed: bytes | None = None

    def __post_init__(self) -> None:
        if len(self.public_seed) != 32:
            raise InvalidParameterError(
                f"public_seed must be 32 bytes, got {len(self.public_seed)}"
            )
        if self.test_seed is not None and len(self.test_seed) != 32:
            raise InvalidParameterError(f"test_seed must be 32 bytes, got {len(self.test_seed)}")

    @classmethod
    def from_seed(cls, seed: int) -> SeedPlan:
        """Seeded test mode: public randomness *and* secrets reproducible from one integer."""
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InvalidParameterError(f"seed must be a non-negative integer, got {seed!r}")
        raw = str(seed).encode()
        return cls(
            public_seed=hashlib.sha256(b"fre-e2t/public-seed/" + raw).digest(),
            test_seed=hashlib.sha256(b"fre-e2t/test-seed/" + raw).digest(),
        )

    @classmethod
    def fresh(cls) -> SeedPlan:
        """Normal mode: a random public seed (recorded with the run); all secrets cryptographic."""
        return cls(public_seed=os.urandom(32))

    @property
    def rng_mode(self) -> str:
        return "seeded" if self.test_seed is not None else "crypto"

    def public(self, label: str) -> RandomSource:
        """Public randomness: identical for every party that knows the public seed."""
        return RandomSource.seeded(self.public_seed, f"{PUBLIC_LABEL}/{label}")

    def secret(self, label: str) -> RandomSource:
        """Secret randomness: seeded only in test mode, cryptographic otherwise."""
        if self.test_seed is None:
            return RandomSource.cryptographic(label)
        return RandomSource.seeded(self.test_seed, label)

    def to_dict(self) -> dict[str, Any]:
        """What a run records: the public seed always, the test seed only in test mode."""
        out: dict[str, Any] = {"public_seed": self.public_seed.hex(), "rng_mode": self.rng_mode}
        if self.test_seed is not None:
            out["test_seed"] = self.test_seed.hex()
        return out
