"""Centralized Fre-E2T (the reference), LDP baselines, accounting, utility and SSP metrics."""

from mechanism.baseline_release import BaselineRelease
from mechanism.fre_e2t import release_threshold, run_mechanism, sample_coins
from mechanism.grid import PublicGrid, decode_bucket, encode_bucket, encode_buckets
from mechanism.ldp_embedding import run_ldp_embedding
from mechanism.ldp_oue import run_ldp_oue
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.release import Release, ReleasedBucket
from mechanism.seeds import SeedPlan

__all__ = [
    "BaselineRelease",
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
    "run_ldp_embedding",
    "run_ldp_oue",
    "run_mechanism",
    "sample_coins",
    "synthetic_population",
]
