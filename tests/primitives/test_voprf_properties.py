"""Property tests (hypothesis): the oblivious protocol computes the PRF, and both backends agree.

* finalize(blind_evaluate(blind(x))) == evaluate(x) in OPRF, VOPRF and POPRF, for random inputs,
  infos, keys and batch sizes, with the batch proof verified;
* the libsodium and pure-Python suites produce byte-identical blinded elements, evaluations,
  proofs and outputs for the same explicit randomness.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from primitives.randomness import RandomSource
from primitives.voprf import Mode, get_suite

MODES = st.sampled_from([Mode.OPRF, Mode.VOPRF, Mode.POPRF])
inputs = st.lists(st.binary(max_size=64), min_size=1, max_size=4)
seeds = st.binary(min_size=32, max_size=32)
infos = st.binary(max_size=32)


def _round_trip(
    group: str, mode: Mode, seed: bytes, xs: list[bytes], info: bytes, rng_seed: int
) -> None:
    suite = get_suite(mode=mode, group=group)
    info = info if mode is Mode.POPRF else b""
    rng = RandomSource.seeded(rng_seed, "voprf-properties")
    sk, pk = suite.derive_key_pair(seed, b"properties")
    blinds, blinded = zip(*(suite.blind(x, rng=rng) for x in xs), strict=True)
    evaluated, proof = suite.blind_evaluate(sk, list(blinded), info=info, rng=rng)
    assert (proof is None) == (mode is Mode.OPRF)
    assert len(evaluated) == len(xs) and all(len(e) == 32 for e in evaluated)
    outputs = suite.finalize(
        xs, list(blinds), evaluated, blinded_elements=list(blinded), pk=pk, proof=proof, info=info
    )
    assert outputs == [suite.evaluate(sk, x, info=info) for x in xs]
    assert all(len(o) == 64 for o in outputs)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(mode=MODES, seed=seeds, xs=inputs, info=infos, rng_seed=st.integers(0, 2**32))
def test_oblivious_evaluation_equals_prf_sodium(
    mode: Mode, seed: bytes, xs: list[bytes], info: bytes, rng_seed: int
) -> None:
    _round_trip("ristretto255-sodium", mode, seed, xs, info, rng_seed)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(mode=MODES, seed=seeds, xs=inputs, info=infos, rng_seed=st.integers(0, 2**32))
def test_oblivious_evaluation_equals_prf_pure(
    mode: Mode, seed: bytes, xs: list[bytes], info: bytes, rng_seed: int
) -> None:
    _round_trip("ristretto255-pure", mode, seed, xs, info, rng_seed)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(mode=MODES, seed=seeds, xs=inputs, info=infos, rng_seed=st.integers(0, 2**32))
def test_backends_produce_identical_transcripts(
    mode: Mode, seed: bytes, xs: list[bytes], info: bytes, rng_seed: int
) -> None:
    info = info if mode is Mode.POPRF else b""
    sodium = get_suite(mode=mode, group="ristretto255-sodium")
    pure = get_suite(mode=mode, group="ristretto255-pure")
    keys = sodium.derive_key_pair(seed, b"agree")
    assert pure.derive_key_pair(seed, b"agree") == keys
    sk, pk = keys
    rng = RandomSource.seeded(rng_seed, "agree")
    blinds = [sodium.group.serialize_scalar(sodium.group.random_scalar(rng)) for _ in xs]
    r = sodium.group.serialize_scalar(sodium.group.random_scalar(rng))
    transcripts = []
    for suite in (sodium, pure):
        blinded = [suite.blind(x, blind=b)[1] for x, b in zip(xs, blinds, strict=True)]
        evaluated, proof = suite.blind_evaluate(
            sk, blinded, info=info, proof_randomness=r if mode is not Mode.OPRF else None
        )
        outputs = suite.finalize(
            xs, blinds, evaluated, blinded_elements=blinded, pk=pk, proof=proof, info=info
        )
        transcripts.append((blinded, evaluated, proof, outputs))
    assert transcripts[0] == transcripts[1]


@settings(max_examples=10, deadline=None, derandomize=True)
@given(rng_seed=st.integers(0, 2**32))
def test_generate_key_pair_is_consistent_and_seedable(rng_seed: int) -> None:
    suite = get_suite(mode=Mode.VOPRF)
    sk, pk = suite.generate_key_pair(RandomSource.seeded(rng_seed, "keys"))
    assert (sk, pk) == suite.generate_key_pair(RandomSource.seeded(rng_seed, "keys"))
    assert suite.public_key(sk) == pk
    other = suite.generate_key_pair(RandomSource.seeded(rng_seed + 1, "keys"))
    assert other[0] != sk
