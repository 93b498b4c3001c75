"""The round setting of the driver tests: ε = 8 at t = 16 (τ = 8, p_s = 0.5) with S_tag's dummy
user at ε0 = 0.3, δ0 = 1e-6, so that a run of a few hundred users carries a few hundred dummy
tags (about a thousand submissions) rather than the paper setting's ~25,000 submissions, whose
sealing and opening took most of each run. δ is raised so that Lemma 1's term at so small a
threshold fits the budget: a test setting, never a deployment's."""

from __future__ import annotations

from fre_protocol.roles.config import ProtocolConfig
from mechanism.params import FreParams

PARAMS = FreParams.paper(8.0, threshold=16, delta=0.3)
#: Chunks of 64 users, so that windows of three chunks do not line up with the participants.
CONFIG = ProtocolConfig(chunk_size=64, dummy_epsilon0=0.3, dummy_delta0=1e-6)

__all__ = ["CONFIG", "PARAMS"]
