"""Centralized Fre-E2T (the reference), privacy accounting, utility and SSP metrics."""

from mechanism.fre_e2t import release_threshold, run_mechanism, sample_coins
from mechanism.grid import PublicGrid, decode_bucket, encode_bucket, encode_buckets
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.release import Release, ReleasedBucket
from mechanism.seeds import SeedPlan

__all__ = [
    "FreParams",
    "Population",
    "PublicGrid",
    "Release",
    "ReleasedBucket",
    "SeedPlan",
    "decode_bucket",
    "encode_bucket",
    "encode_buckets",
    "release_threshold",
    "run_mechanism",
    "sample_coins",
    "synthetic_population",
]
