"""Swappable cryptographic and sampling primitives. Imports nothing else of fre-e2t.

Families (see :mod:`primitives.registry`): ristretto255 groups, the RFC 9497 OPRF/VOPRF/POPRF
suite, additive secret sharing, discrete Gaussian samplers, the distributed discrete Gaussian
encoder, the TSDLap dummy generator, the shuffler and the sealed user→server channel.
"""

from primitives.errors import (
    DecodeError,
    FreError,
    InfeasibleBudgetError,
    InvalidInputError,
    InvalidParameterError,
    ProtocolStateError,
    UnknownComponentError,
    VerificationError,
)
from primitives.randomness import RandomSource

__all__ = [
    "DecodeError",
    "FreError",
    "InfeasibleBudgetError",
    "InvalidInputError",
    "InvalidParameterError",
    "ProtocolStateError",
    "RandomSource",
    "UnknownComponentError",
    "VerificationError",
]
