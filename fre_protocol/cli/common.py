"""Flags and file handling shared by the sub-commands that run a release."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import numpy as np

from fre_protocol.outputs import prepare_out_dir, write_json_atomic, write_npy_atomic
from mechanism.params import FreParams
from primitives.errors import InvalidInputError, InvalidParameterError

# The output writers live in fre_protocol.outputs (the library uses them too); named here for
# the sub-commands that import them from this module.
__all__ = [
    "add_param_flags", "load_embeddings", "non_negative_int", "params_from_args", "parse_epsilon",
    "positive_int", "prepare_out_dir", "write_json_atomic", "write_npy_atomic",
]


def parse_epsilon(text: str) -> float:
    if text.strip().lower() in ("inf", "infinity", "∞"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0 or 'inf', got {text!r}") from None
    return value


def _integer_at_least(text: str, minimum: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (seeds, counts)."""
    return _integer_at_least(text, 0, "a non-negative integer")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (sizes, worker counts)."""
    return _integer_at_least(text, 1, "a positive integer")


def add_param_flags(parser: argparse.ArgumentParser, *, defaults: FreParams | None = None) -> None:
    """The public parameters of a release, named as in the paper (SPEC §3)."""
    d = defaults or FreParams()
    g = parser.add_argument_group("privacy and grid parameters")
    g.add_argument("--epsilon", type=parse_epsilon, default=d.epsilon, help="total ε ('inf' = non-DP)")
    g.add_argument("--delta", type=float, default=d.delta, help="total δ")
    g.add_argument("--radius", type=float, default=d.radius, help="neighbourhood radius r")
    g.add_argument("--threshold", type=int, default=d.threshold, help="frequency threshold t")
    g.add_argument("--k", type=int, default=d.k, help="projected dimension k")
    g.add_argument("--p-sample", type=float, default=d.p_sample, help="sampling rate p_s")
    g.add_argument("--budget-factor", type=float, default=d.budget_factor, help="Lemma 1 factor v")
    g.add_argument(
        "--sensitivity-ratio", type=float, default=d.sensitivity_ratio, help="u in Δ = min(u·r, 2C)"
    )
    g.add_argument(
        "--edge-multiplier", type=float, default=d.edge_multiplier, help="m_L in L = m_L·2r/√k"
    )
    g.add_argument("--rounding", choices=["exact", "paper"], default=d.rounding)
    g.add_argument(
        "--clip", type=float, default=d.clip, metavar="C",
        help="L2 clip C of each embedding (1 = unit norm): caps the sensitivity at Δ = min(u·r, 2C)",
    )


def add_pool_flags(group: argparse._ArgumentGroup) -> None:
    """The public pool's flags (retrieval's index and the guided search's seeds)."""
    group.add_argument("--pool-file", action="append", default=[], metavar="FILE",
                       help="extra PUBLIC texts for the pool (.txt/.jsonl/.csv; repeatable)")
    group.add_argument("--pool-field", metavar="NAME", help="field/column of --pool-file")
    group.add_argument("--pool-sources", default="news,wordnet",
                       help="built-in public pool sources, comma separated, or 'none' (default: news,wordnet)")
    group.add_argument("--pool-max", type=int, default=24000,
                       help="cap on built-in pool texts (0 = no cap; default 24000)")


def pool_sources(args: argparse.Namespace) -> tuple[str, ...]:
    """``--pool-sources`` as a tuple ('none' = no built-in source); ``--pool-max`` checked."""
    if args.pool_max is not None and args.pool_max < 0:
        raise InvalidParameterError(f"--pool-max must be >= 0 (0 = no cap), got {args.pool_max}")
    return tuple(s.strip() for s in args.pool_sources.split(",") if s.strip() and s.strip() != "none")


def params_from_args(args: argparse.Namespace) -> FreParams:
    p_sample = args.p_sample
    if math.isinf(args.epsilon):
        p_sample = 1.0
    return FreParams(
        epsilon=args.epsilon,
        delta=args.delta,
        radius=args.radius,
        threshold=args.threshold,
        k=args.k,
        p_sample=p_sample,
        budget_factor=args.budget_factor,
        sensitivity_ratio=args.sensitivity_ratio,
        edge_multiplier=args.edge_multiplier,
        rounding=args.rounding,
        clip=args.clip,
    )


def load_embeddings(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an (N, d) float array from a .npy file with a clear error for every bad case."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"embeddings file {str(p)!r} does not exist or is not a file")
    try:
        x = np.load(p, allow_pickle=False, mmap_mode="r")
    except (ValueError, OSError, EOFError) as exc:
        raise InvalidInputError(
            f"embeddings file {str(p)!r} is not a readable .npy array ({exc.__class__.__name__}: {exc})"
        ) from None
    if x.ndim != 2:
        raise InvalidInputError(
            f"embeddings must be a 2-D array (users × dimensions), got shape {tuple(x.shape)}"
        )
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise InvalidInputError(f"embeddings must be non-empty, got shape {tuple(x.shape)}")
    if not np.issubdtype(x.dtype, np.floating) and not np.issubdtype(x.dtype, np.integer):
        raise InvalidInputError(f"embeddings must hold real numbers, got dtype {x.dtype}")
    x = np.asarray(x, dtype=np.float32 if x.dtype != np.float64 else np.float64)
    # Chunked so a 1M × 768 file is checked without a second full-size temporary.
    for start in range(0, x.shape[0], 65536):
        if not np.isfinite(x[start : start + 65536]).all():
            raise InvalidInputError(f"embeddings contain NaN or infinite values (rows from {start})")
    return x
