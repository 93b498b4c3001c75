"""Centralized Fre-E2T (the reference), privacy accounting, utility and SSP metrics."""
