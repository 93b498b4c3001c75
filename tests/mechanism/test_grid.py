"""Public grid (design §3 steps 1-2): derivation from the public seed, canonical buckets, encoding."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mechanism.grid import PublicGrid, decode_bucket, encode_bucket, encode_buckets
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

PARAMS = FreParams.paper(8)


def _unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    x = RandomSource.seeded(seed, "test-rows").normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _canonical(grid: PublicGrid, x: np.ndarray) -> np.ndarray:
    """The definition of a bucket, computed the slow way: fsum of exact float64 products."""
    z = grid.projection.astype(np.float64)
    out = np.empty((x.shape[0], grid.k), dtype=np.int64)
    for i, row in enumerate(np.asarray(x, dtype=np.float32).astype(np.float64)):
        for j in range(grid.k):
            s = math.fsum((row * z[:, j]).tolist())
            out[i, j] = math.floor(((s / math.sqrt(grid.k)) - float(grid.offsets[j])) / grid.edge)
    return out


# -- derivation --------------------------------------------------------------------------------
def test_grid_follows_the_public_seed_contract() -> None:
    seeds = SeedPlan.from_seed(11)
    grid = PublicGrid.derive(seeds, 24, PARAMS)
    z = seeds.public("projection").normal((24, PARAMS.k)).astype(np.float32)
    o = seeds.public("offsets").uniform(PARAMS.k) * PARAMS.bucket_edge
    assert grid.projection.dtype == np.float32 and grid.projection.shape == (24, 20)
    np.testing.assert_array_equal(grid.projection, z)
    np.testing.assert_array_equal(grid.offsets, o)
    assert grid.edge == PARAMS.bucket_edge
    assert np.all((grid.offsets >= 0) & (grid.offsets < grid.edge))


def test_same_public_seed_same_grid_whatever_the_test_seed() -> None:
    a = SeedPlan.from_seed(1)
    b = SeedPlan(public_seed=a.public_seed, test_seed=bytes(32))  # other secrets, same public seed
    c = SeedPlan(public_seed=a.public_seed)  # crypto mode, same public seed
    grids = [PublicGrid.derive(s, 16, PARAMS) for s in (a, b, c)]
    for g in grids[1:]:
        np.testing.assert_array_equal(g.projection, grids[0].projection)
        np.testing.assert_array_equal(g.offsets, grids[0].offsets)


def test_different_public_seeds_give_different_grids() -> None:
    g1 = PublicGrid.derive(SeedPlan.from_seed(1), 16, PARAMS)
    g2 = PublicGrid.derive(SeedPlan.from_seed(2), 16, PARAMS)
    g3 = PublicGrid.derive(SeedPlan.fresh(), 16, PARAMS)
    g4 = PublicGrid.derive(SeedPlan.fresh(), 16, PARAMS)
    assert not np.array_equal(g1.projection, g2.projection)
    assert not np.array_equal(g1.offsets, g2.offsets)
    assert not np.array_equal(g3.projection, g4.projection)


def test_grid_is_read_only_and_validated() -> None:
    grid = PublicGrid.derive(SeedPlan.from_seed(1), 8, PARAMS)
    with pytest.raises(ValueError):
        grid.projection[0, 0] = 1.0
    with pytest.raises(InvalidParameterError, match="offsets must lie in"):
        PublicGrid(projection=grid.projection, offsets=grid.offsets + grid.edge, edge=grid.edge)
    with pytest.raises(InvalidParameterError, match="projection must be"):
        PublicGrid(projection=grid.projection.astype(np.float64), offsets=grid.offsets, edge=1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="dim must be"):
        PublicGrid.derive(SeedPlan.from_seed(1), 0, PARAMS)


# -- canonical buckets --------------------------------------------------------------------------
def test_buckets_equal_the_exact_definition() -> None:
    grid = PublicGrid.derive(SeedPlan.from_seed(3), 48, PARAMS)
    x = _unit_rows(300, 48, seed=1)
    np.testing.assert_array_equal(grid.bucket_indices(x), _canonical(grid, x))
    # and agree with the plain formula away from boundaries (a sanity check of the formula)
    y = grid.project(x)
    naive = np.floor((y - grid.offsets) / grid.edge).astype(np.int64)
    assert (naive == grid.bucket_indices(x)).mean() > 0.999


def test_buckets_do_not_depend_on_batching() -> None:
    grid = PublicGrid.derive(SeedPlan.from_seed(4), 96, PARAMS)
    x = _unit_rows(2000, 96, seed=2)
    whole = grid.bucket_indices(x)
    rows = np.concatenate([grid.bucket_indices(x[i]) for i in range(0, 2000, 7)])
    np.testing.assert_array_equal(rows, whole[::7])
    np.testing.assert_array_equal(grid.bucket_indices(x, chunk_rows=13), whole)
    np.testing.assert_array_equal(grid.bucket_indices(x.astype(np.float64)), whole)


def test_rows_on_grid_boundaries_take_the_canonical_cell() -> None:
    """Offsets are placed on (and within 1e-9 of) the exact projections, so every entry needs the
    float64 or the fsum fallback; the result must still be the exact definition."""
    base = PublicGrid.derive(SeedPlan.from_seed(5), 32, PARAMS)
    x = _unit_rows(6, 32, seed=3)
    z = base.projection.astype(np.float64)
    k, edge = base.k, base.edge
    for shift in (0.0, 1e-9, -1e-9, 1e-13):
        exact = np.array(
            [math.fsum((x[0].astype(np.float64) * z[:, j]).tolist()) for j in range(k)]
        )
        offsets = np.mod(exact / math.sqrt(k) + shift, edge)
        grid = PublicGrid(projection=base.projection, offsets=offsets, edge=edge)
        np.testing.assert_array_equal(grid.bucket_indices(x), _canonical(grid, x))


def test_bucket_indices_rejects_bad_rows() -> None:
    grid = PublicGrid.derive(SeedPlan.from_seed(1), 8, PARAMS)
    with pytest.raises(InvalidInputError, match=r"shape \(n, 8\)"):
        grid.bucket_indices(np.zeros((3, 7), dtype=np.float32))
    bad = np.ones((4, 8), dtype=np.float32)
    bad[2, 3] = np.nan
    with pytest.raises(InvalidInputError, match="row 2"):
        grid.bucket_indices(bad)
    with pytest.raises(InvalidInputError, match="NaN, infinite"):
        grid.bucket_indices(np.full((1, 8), np.inf, dtype=np.float32))
    with pytest.raises(InvalidInputError, match="too large"):
        grid.bucket_indices(np.full((1, 8), 1e18, dtype=np.float32))


# -- encoding -----------------------------------------------------------------------------------
def test_encoding_known_answer() -> None:
    raw = encode_bucket(np.array([1, -1, 0, -(2**63), 2**63 - 1], dtype=np.int64))
    assert raw.hex() == (
        "0000000000000001" "ffffffffffffffff" "0000000000000000" "8000000000000000" "7fffffffffffffff"
    )  # fmt: skip
    assert encode_bucket([5, -2]) == bytes.fromhex("0000000000000005fffffffffffffffe")


@given(hnp.arrays(np.int64, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=6)))
def test_encoding_round_trips_row_by_row(indices: np.ndarray) -> None:
    encoded = encode_buckets(indices)
    assert len(encoded) == indices.shape[0]
    for row, raw in zip(indices, encoded, strict=True):
        assert raw == encode_bucket(row)
        assert len(raw) == 8 * indices.shape[1]
        np.testing.assert_array_equal(decode_bucket(raw, indices.shape[1]), row)


@given(
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=3, max_size=3),
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=3, max_size=3),
)
def test_encoding_is_injective(a: list[int], b: list[int]) -> None:
    assert (encode_bucket(a) == encode_bucket(b)) == (a == b)


def test_encoding_order_is_byte_order_of_twos_complement() -> None:
    """Release order is sorted hex ids: non-negative indices before negative ones (two's
    complement big-endian), and lexicographic across coordinates."""
    rows = [[0, 5], [0, -1], [1, 0], [-1, 0], [0, 0]]
    ids = sorted(encode_bucket(r).hex() for r in rows)
    assert [decode_bucket(bytes.fromhex(i)).tolist() for i in ids] == [
        [0, 0],
        [0, 5],
        [0, -1],
        [1, 0],
        [-1, 0],
    ]


def test_encoding_rejects_non_integers_and_bad_bytes() -> None:
    with pytest.raises(InvalidInputError, match="integers"):
        encode_bucket(np.array([1.0, 2.0]))
    with pytest.raises(InvalidInputError, match="non-empty 1-D"):
        encode_bucket(np.array([], dtype=np.int64))
    with pytest.raises(InvalidInputError, match="signed 64-bit"):
        encode_bucket(np.array([2**63], dtype=np.uint64))
    with pytest.raises(DecodeError, match="multiple of 8"):
        decode_bucket(b"\x00" * 7)
    with pytest.raises(DecodeError, match="must be 16 bytes"):
        decode_bucket(b"\x00" * 24, k=2)
