"""The chi-square tail probability and normal quantile of the statistical tests: they live in the
package (:mod:`fre_protocol.testing.stats`), where the public conformance suite uses them too."""

from fre_protocol.testing.stats import chi2_sf, z_two_sided

__all__ = ["chi2_sf", "z_two_sided"]
