"""Discrete Gaussian noise on the integers: the sampler interface and the target distribution.

``N_Z(0, σ²)`` puts mass ``exp(−x²/(2σ²)) / Z(σ)`` on every integer ``x`` (CKS20 Def. 1). ``σ`` is
the *scale parameter*; the variance is slightly below ``σ²`` for small ``σ`` and equal to it to
double precision once ``σ ≳ 2`` (see :func:`discrete_gaussian_variance`).

Two samplers implement :class:`DiscreteGaussianSampler` (registry family ``discrete_gaussian``):

* ``"cks-exact"`` — :class:`~primitives.noise.cks_exact.ExactDiscreteGaussian`, CKS20 Alg. 3 with
  exact rational arithmetic; every coin is an exact uniform integer from the RandomSource;
* ``"fast-vectorized"`` — :class:`~primitives.noise.fast.FastDiscreteGaussian`, numpy, float64.

The helpers in :mod:`primitives.noise.base` evaluate the target pmf (to double precision, not by a continuous
approximation) so tests can compare both samplers against it.
"""

from primitives.noise.base import (
    DiscreteGaussianSampler,
    check_sigma,
    check_size,
    discrete_gaussian_bin_probabilities,
    discrete_gaussian_normalizer,
    discrete_gaussian_pmf,
    discrete_gaussian_variance,
)
from primitives.noise.cks_exact import ExactDiscreteGaussian
from primitives.noise.fast import FastDiscreteGaussian

__all__ = [
    "DiscreteGaussianSampler",
    "ExactDiscreteGaussian",
    "FastDiscreteGaussian",
    "check_sigma",
    "check_size",
    "discrete_gaussian_bin_probabilities",
    "discrete_gaussian_normalizer",
    "discrete_gaussian_pmf",
    "discrete_gaussian_variance",
]
