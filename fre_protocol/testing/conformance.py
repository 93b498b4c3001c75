"""The conformance suite: every property a family's contract promises, run on any implementation.

``check(family, name)`` builds the component registered as ``name`` in ``family`` (by the family's
factory convention, :mod:`primitives.contracts`), checks it against the family's Protocol, then
runs the family's properties through one harness (:func:`run_properties`) that every
implementation goes through — the same checks for the built-ins and for a plug-in, after the
VDAF reference's ``TestVdaf.run_vdaf_test``. It returns a :class:`Report`; ``raise_on_failure``
turns a failing report into :class:`ConformanceError`.

Properties (``fast`` tier: small samples; ``full``: ten times the samples, same α):

================= ===========================================================================
family            properties
================= ===========================================================================
group             serialize/deserialize round trip of elements and scalars; the scalar
                  and element operations agree (homomorphism, inverse, multi-scalar sum);
                  the identity and a scalar ≥ the order are refused; the RFC 9497 VOPRF
                  vectors through the reference suite on this group
oprf              RFC 9497 App. A.1.2 (VOPRF, ristretto255-SHA512) known answers: key
                  derivation, blinding, evaluation and proof, unblinded output, batch
                  verify-and-finalize; a tampered proof fails its item
secret_sharing    shares reconstruct mod ``ring_modulus`` = 2^b (per user, aggregated, with a
                  signed top-up by ``add_integers``); wire sizes; truncation refused; each
                  share alone is uniform on [0, ``modulus``) (chi-square, α below)
discrete_gaussian mean and variance (z-tests) and the whole pmf with both tails binned
                  (chi-square) at several σ; σ = 0 is a point mass
ddg_encoder       range and shape; noiseless encode → modular sum → decode within
                  quantization (γ√d' per user); decode_sum equals centring + unrotate;
                  noisy sums within sum_norm_bound
dummy_generator   plan levels are 1..⌈τ⌉−1 with counts ≥ 0; the pooled counts' mean is
                  ``shift`` (z-test) and, where the generator states a pmf (``pmf_vector``),
                  their distribution is it (chi-square)
shuffler          a permutation of the very objects given; positions uniform, alone and in
                  pairs (chi-square)
channel           round trip; ciphertext = plaintext + ``overhead`` bytes for every size;
                  tampering, truncation and the wrong key refused in place; a prepared seal
                  used once; seeded keys reproducible; ``skip_seals`` skips exactly
broadcast         every released tag answers its count exactly after build → load; absent
                  tags answer a count at most at a few times the stated false-positive rate
================= ===========================================================================

Statistics. Every statistical property is a test at level ``ALPHA`` = 1e-6 (stated per property in
the report). The suite draws from seeded sources, so for an implementation that uses the given
:class:`~primitives.randomness.RandomSource` the outcome is fixed; one that draws its own
randomness (a keyed shuffler) fails a property it meets with probability α per run. A full
``fast`` run of the built-ins makes at most 40 statistical tests, so a correct set of
implementations fails by chance with probability below 4e-5.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fre_protocol.testing.stats import chi2_sf, z_two_sided
from primitives import registry
from primitives.contracts import contract_problems
from primitives.errors import DecodeError, FreError, ProtocolStateError
from primitives.randomness import RandomSource

#: Level of every statistical test of the suite (probability that a correct implementation,
#: drawing fresh randomness, fails one property).
ALPHA = 1e-6

TIERS = {"fast": 1, "full": 10}


class ConformanceError(FreError, AssertionError):
    """A component failed one or more properties of its family's contract."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One property's result: ``passed``, a line on what was measured, the test level when the
    property is statistical, and the seconds it took."""

    prop: str
    passed: bool
    detail: str
    alpha: float | None = None
    seconds: float = 0.0


@dataclass(slots=True)
class Report:
    """Everything :func:`check` ran on one component."""

    family: str
    name: str
    tier: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.passed for o in self.outcomes)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.passed]

    @property
    def false_failure_probability(self) -> float:
        """Upper bound (union) on a correct implementation failing a statistical property."""
        return float(sum(o.alpha or 0.0 for o in self.outcomes))

    def lines(self) -> list[str]:
        out = [f"{self.family} {self.name!r} ({self.tier}): {'ok' if self.ok else 'FAILED'}"]
        for o in self.outcomes:
            level = f" [α={o.alpha:g}]" if o.alpha else ""
            out.append(f"  {'ok  ' if o.passed else 'FAIL'} {o.prop}{level}: {o.detail} ({o.seconds:.2f} s)")
        return out

    def raise_for_failures(self) -> Report:
        if not self.ok:
            raise ConformanceError("\n".join(self.lines()))
        return self


class PropertyFailed(AssertionError):
    """Raised inside a property: the property does not hold (the message says how)."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise PropertyFailed(message)


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a property gets: the tier's sample scale, a seeded source of its own, and ``stat`` to
    record statistical tests (each at :data:`ALPHA`)."""

    scale: int
    rng: RandomSource
    stats: list[str]

    def samples(self, n: int) -> int:
        return n * self.scale

    def chi_square(self, observed: Any, expected: Any, what: str) -> None:
        """Goodness of fit of counts ``observed`` to ``expected`` (same total), at ALPHA."""
        obs = np.asarray(observed, dtype=np.float64)
        exp = np.asarray(expected, dtype=np.float64)
        stat = float(((obs - exp) ** 2 / exp).sum())
        p = chi2_sf(stat, obs.size - 1)
        self.stats.append(f"{what}: chi2={stat:.1f} dof={obs.size - 1} p={p:.3g}")
        require(p > ALPHA, f"{what} is not as it should be: chi-square {stat:.1f} on {obs.size - 1} dof, p = {p:.3g} <= {ALPHA}")

    def z(self, value: float, target: float, sd: float, what: str) -> None:
        """Two-sided z-test of ``value`` against ``target`` with standard error ``sd``, at ALPHA."""
        bound = z_two_sided(ALPHA) * sd
        self.stats.append(f"{what}: {value:.4g} vs {target:.4g} ± {bound:.3g}")
        require(abs(value - target) <= bound, f"{what} = {value:.6g}, expected {target:.6g} ± {bound:.3g} (z-test at α={ALPHA})")


Property = Callable[[Any, Ctx], Any]


@dataclass(frozen=True, slots=True)
class Prop:
    name: str
    run: Property
    statistical: bool = False


def run_properties(family: str, name: str, component: Any, props: list[Prop], *, tier: str = "fast", seed: int = 0) -> Report:
    """The one harness: the contract check, then each property on ``component``; an exception in a
    property is that property's failure, never the suite's."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {sorted(TIERS)}, got {tier!r}")
    report = Report(family, name, tier)
    problems = contract_problems(family, component)
    report.outcomes.append(Outcome("contract", not problems, "; ".join(problems) or "meets the Protocol"))
    if problems:
        return report
    for prop in props:
        ctx = Ctx(TIERS[tier], RandomSource.seeded(seed, f"conformance/{family}/{name}/{prop.name}"), [])
        t0 = time.perf_counter()
        try:
            detail = prop.run(component, ctx) or "holds"
            passed = True
        except PropertyFailed as exc:
            detail, passed = str(exc), False
        except Exception as exc:  # noqa: BLE001 - a crash is a failure of the property
            detail, passed = f"raised {type(exc).__name__}: {exc}", False
        if ctx.stats and passed:
            detail = "; ".join(ctx.stats)
        report.outcomes.append(
            Outcome(prop.name, passed, detail, ALPHA * max(1, len(ctx.stats)) if prop.statistical else None, time.perf_counter() - t0)
        )
    return report


def pooled(observed: Any, expected: Any, minimum: float = 5.0) -> tuple[Any, Any]:
    """Adjacent cells merged, left to right, until each expects at least ``minimum`` (the last
    short run joins the cell before it): the usual condition for the chi-square approximation."""
    obs_out: list[float] = []
    exp_out: list[float] = []
    o_run = e_run = 0.0
    for o, e in zip(np.asarray(observed, dtype=np.float64), np.asarray(expected, dtype=np.float64), strict=True):
        o_run, e_run = o_run + o, e_run + e
        if e_run >= minimum:
            obs_out.append(o_run)
            exp_out.append(e_run)
            o_run = e_run = 0.0
    if e_run or o_run:
        if obs_out:
            obs_out[-1] += o_run
            exp_out[-1] += e_run
        else:
            obs_out, exp_out = [o_run], [e_run]
    return np.array(obs_out), np.array(exp_out)


# -- building by each family's factory convention ------------------------------------------------

#: The DDG configuration the encoder properties use (small, rotated, 20-bit ring).
def _ddg_config() -> Any:
    from primitives.ddg.encoder import DDGConfig

    return DDGConfig(dim=12, padded_dim=16, gamma=1e-3, sigma_int=4.0, modulus_bits=24, clip=1.0)


def build(family: str, name: str) -> Any:
    """The component ``name`` of ``family``, built as the protocol builds it (the factory
    conventions in each Protocol's docstring); parameterised families get the suite's own
    parameters (sharing: ``bits=16``; encoder: a small DDGConfig; dummies: ε0 = 1, δ0 = 1e-6)."""
    factory = registry.resolve(family, name)
    if family == "oprf":
        from primitives.voprf import Mode

        return factory(name, Mode.VOPRF, group=registry.create("group", "ristretto255-sodium"), workers=1)
    if family == "secret_sharing":
        return factory(bits=16)
    if family == "ddg_encoder":
        return factory(_ddg_config(), registry.create("discrete_gaussian", "fast-vectorized"))
    if family == "dummy_generator":
        return factory(1.0, 1e-6, 1)
    return factory()


def check(family: str, name: str, *, tier: str = "fast", seed: int = 0, raise_on_failure: bool = False) -> Report:
    """Build ``name`` of ``family`` from the registry and run the family's properties on it."""
    if family not in PROPERTIES:
        raise ValueError(f"family must be one of {sorted(PROPERTIES)}, got {family!r}")
    try:
        component = build(family, name)
    except Exception as exc:  # noqa: BLE001 - reported, like a property
        report = Report(family, name, tier, [Outcome("build", False, f"raised {type(exc).__name__}: {exc}")])
    else:
        report = run_properties(family, name, component, PROPERTIES[family], tier=tier, seed=seed)
    return report.raise_for_failures() if raise_on_failure else report


def check_all(*, tier: str = "fast") -> list[Report]:
    """:func:`check` on every registered implementation of every family."""
    return [check(f, n, tier=tier) for f in sorted(PROPERTIES) for n in registry.names(f)]


# -- group --------------------------------------------------------------------------------------


def _group_round_trip(g: Any, ctx: Ctx) -> str:
    for k in range(ctx.samples(8)):
        s = g.random_scalar(ctx.rng)
        enc = g.serialize_scalar(s)
        require(len(enc) == g.scalar_size, f"scalar encoding is {len(enc)} bytes, scalar_size {g.scalar_size}")
        require(g.serialize_scalar(g.deserialize_scalar(enc)) == enc, "scalar round trip changed the encoding")
        e = g.scalar_mult_base(s)
        data = g.serialize_element(e)
        require(len(data) == g.element_size, f"element encoding is {len(data)} bytes, element_size {g.element_size}")
        require(g.serialize_element(g.deserialize_element(data)) == data, f"element round trip {k} changed the encoding")
    return f"{ctx.samples(8)} random scalars and elements"


def _group_algebra(g: Any, ctx: Ctx) -> str:
    ser = g.serialize_element
    for _ in range(ctx.samples(4)):
        s, t = g.random_scalar(ctx.rng), g.random_scalar(ctx.rng)
        sb, tb = g.scalar_mult_base(s), g.scalar_mult_base(t)
        require(ser(g.add(sb, tb)) == ser(g.scalar_mult_base(g.scalar_add(s, t))), "sB + tB != (s+t)B")
        require(ser(g.scalar_mult(t, sb)) == ser(g.scalar_mult_base(g.scalar_mul(s, t))), "t(sB) != (st)B")
        require(ser(g.scalar_mult(g.scalar_inverse(s), g.scalar_mult(s, tb))) == ser(tb), "s^-1 (s P) != P")
        require(g.scalar_is_zero(g.scalar_sub(s, s)), "s - s is not zero")
        require(not g.scalar_is_zero(s), "random_scalar returned zero")
        require(ser(g.multi_scalar_mult([s, t], [tb, sb])) == ser(g.scalar_mult_base(g.scalar_add(g.scalar_mul(s, t), g.scalar_mul(t, s)))),
                "multi_scalar_mult disagrees with the sum of products")
        require(not g.is_identity(sb), "a random multiple of the base is the identity")
        require(g.is_identity(g.identity()), "identity() is not the identity")
        h1, h2 = g.hash_to_group(b"conformance", b"DST"), g.hash_to_group(b"conformance", b"DST")
        require(ser(h1) == ser(h2), "hash_to_group is not deterministic")
    return "homomorphism, inverse, multi-scalar sum, identity"


def _group_refusals(g: Any, ctx: Ctx) -> str:
    for bad, what in ((bytes(g.element_size), "the identity encoding"), (b"\x01" * (g.element_size - 1), "a short encoding")):
        try:
            g.deserialize_element(bad)
        except DecodeError:
            pass
        else:
            raise PropertyFailed(f"deserialize_element accepted {what}")
    try:
        g.deserialize_scalar(b"\xff" * g.scalar_size)
    except DecodeError:
        pass
    else:
        raise PropertyFailed("deserialize_scalar accepted a value >= the order")
    return "identity, short encoding and scalar >= order refused with DecodeError"


def _group_rfc9497(g: Any, ctx: Ctx) -> str:
    from primitives.voprf import Mode, get_suite

    return _rfc9497_vectors(get_suite("ristretto255-SHA512", Mode.VOPRF, group=g, workers=1), ctx)


# -- oprf ---------------------------------------------------------------------------------------


def _rfc9497_vectors(suite: Any, ctx: Ctx) -> str:
    from fre_protocol.testing.vectors import load

    data = load("rfc9497/ristretto255-sha512.json")
    entry = next(m for m in data["modes"] if m["name"] == "VOPRF")
    h = bytes.fromhex
    sk, pk = suite.derive_key_pair(h(entry["seed"]), h(entry["key_info"]))
    require(bytes(sk).hex() == entry["skSm"] and pk.hex() == entry["pkSm"], "DeriveKeyPair differs from RFC 9497 A.1.2")
    g = suite.group
    for v in entry["vectors"]:
        where = f"vector {v['index']}"
        inputs, blinds = [h(x) for x in v["input"]], [h(x) for x in v["blind"]]
        blinded = [suite.blind(x, blind=b)[1] for x, b in zip(inputs, blinds, strict=True)]
        require([b.hex() for b in blinded] == v["blinded_element"], f"{where}: Blind differs")
        evaluated, proof = suite.blind_evaluate(sk, blinded, proof_randomness=h(v["proof_random_scalar"]))
        require([e.hex() for e in evaluated] == v["evaluation_element"], f"{where}: BlindEvaluate differs")
        require(proof is not None and proof.hex() == v["proof"], f"{where}: the proof differs")
        require([suite.evaluate(sk, x).hex() for x in inputs] == v["output"], f"{where}: Evaluate differs")
        inverses = [g.serialize_scalar(g.scalar_inverse(g.deserialize_scalar(b))) for b in blinds]
        out = suite.verify_and_finalize(inputs, inverses, blinded, evaluated, proof, pk=pk)
        require([o.hex() if isinstance(o, bytes) else repr(o) for o in out] == v["output"], f"{where}: VerifyAndFinalize differs")
        bad = bytearray(proof)
        bad[-1] ^= 1
        out = suite.verify_and_finalize(inputs, inverses, blinded, evaluated, bytes(bad), pk=pk)
        require(all(not isinstance(o, bytes) for o in out), f"{where}: a tampered proof was accepted")
    return f"RFC 9497 A.1.2: key, {len(entry['vectors'])} vectors (Blind, BlindEvaluate, proof, Evaluate, VerifyAndFinalize), tampered proof refused"


def _oprf_vectors(suite: Any, ctx: Ctx) -> str:
    return _rfc9497_vectors(suite, ctx)


def _oprf_round_trip(suite: Any, ctx: Ctx) -> str:
    sk, pk = suite.generate_key_pair(ctx.rng)
    inputs = [ctx.rng.random_bytes(16) for _ in range(4)]
    pairs = [suite.blind(x, rng=ctx.rng) for x in inputs]
    blinded = [b for _, b in pairs]
    answers = suite.blind_evaluate_each(sk, blinded, [ctx.rng.child(str(i)) for i in range(len(blinded))])
    g = suite.group
    inverses = [g.serialize_scalar(g.scalar_inverse(g.deserialize_scalar(bytes(b)))) for b, _ in pairs]
    out = suite.verify_and_finalize(inputs, inverses, blinded, [e for e, _ in answers], [p for _, p in answers], pk=pk)
    require(out == [suite.evaluate(sk, x) for x in inputs], "per-element proofs do not finalize to Evaluate")
    suite.warm_up()
    return "generate_key_pair, blind, blind_evaluate_each, verify_and_finalize agree with evaluate"


# -- secret sharing -----------------------------------------------------------------------------


def _sharing_reconstructs(s: Any, ctx: Ctx) -> str:
    m = int(s.ring_modulus)
    require(m == 1 << 16, f"built for bits=16, reconstruction must answer mod 2^16, got {m}")
    n, d = ctx.samples(64), 9
    values = ctx.rng.integers_below(m, n * d).reshape(n, d).astype(np.uint64)
    values[0] = 0
    values[1] = m - 1
    a, b = s.share(values, ctx.rng)
    sizes = s.share_sizes(d)
    wa = [s.encode_share(a, i) for i in range(n)]
    wb = [s.encode_share(b, i) for i in range(n)]
    require({len(w) for w in wa} == {sizes[0]} and {len(w) for w in wb} == {sizes[1]}, f"wire sizes differ from share_sizes {sizes}")
    ra = np.stack([s.decode_share(w, d) for w in wa])
    rb = np.stack([s.decode_share(w, d) for w in wb])
    require(np.array_equal(s.reconstruct(ra, rb), values), "reconstruct(a_i, b_i) != x_i")
    total = (values.astype(object).sum(axis=0) % m).astype(np.uint64)
    require(np.array_equal(s.reconstruct(s.aggregate(ra), s.aggregate(rb)), total), "reconstruct of the aggregates != sum mod M")
    require(np.array_equal(s.reconstruct(s.aggregate(a), s.aggregate(b)), total), "aggregating ShareBatches differs")
    out = np.empty_like(total)
    s.reconstruct(s.aggregate(ra), s.aggregate(rb), out=out)
    require(np.array_equal(out, total), "reconstruct(out=) differs")
    noise = ctx.rng.integers_below(1 << 12, d).astype(np.int64) - (1 << 11)
    topped = s.add_integers(s.aggregate(ra), noise)
    want = ((total.astype(object) + noise.astype(object)) % m).astype(np.uint64)
    require(np.array_equal(s.reconstruct(topped, s.aggregate(rb)), want), "add_integers (signed top-up) breaks the sum mod 2^b")
    try:
        s.decode_share(wa[0][:-1], d)
    except DecodeError:
        pass
    else:
        raise PropertyFailed("decode_share accepted a truncated share")
    return f"{n} users × {d}: per user, aggregated, signed top-up, out=, wire sizes {sizes}, truncation refused"


def _sharing_uniform(s: Any, ctx: Ctx) -> str:
    m = int(s.modulus)  # shares are uniform on [0, modulus), whatever the ring they carry
    n, d, cells = ctx.samples(4000), 8, 16
    for constant in (0, int(s.ring_modulus) - 1):
        values = np.full((n, d), constant, dtype=np.uint64)
        a, b = s.share(values, ctx.rng)
        for which, batch in (("first", a), ("second", b)):
            raw = np.asarray(batch.values(), dtype=np.uint64).ravel()
            bins = (raw.astype(np.float64) * cells / m).astype(np.int64)
            ctx.chi_square(np.bincount(bins, minlength=cells), np.full(cells, raw.size / cells), f"{which} share of x={constant} ({cells} cells)")
    return None


# -- discrete Gaussian --------------------------------------------------------------------------


def _sampler_moments_and_tails(sampler: Any, ctx: Ctx) -> str:
    from primitives.noise.base import (
        discrete_gaussian_bin_probabilities,
        discrete_gaussian_variance,
    )

    require(np.all(sampler.sample(0.0, 10, ctx.rng) == 0), "sigma = 0 is not a point mass at 0")
    n = ctx.samples(20000)
    for sigma in (0.7, 6.0, 300.0):
        x = np.asarray(sampler.sample(sigma, n, ctx.rng.child(f"s{sigma}")), dtype=np.int64)
        require(x.shape == (n,) and np.issubdtype(x.dtype, np.integer), f"sample returned {x.dtype} {x.shape}, wanted {n} integers")
        var = discrete_gaussian_variance(sigma)
        ctx.z(float(x.mean()), 0.0, math.sqrt(var / n), f"mean at σ={sigma}")
        # Var of the sample variance ≈ (μ4 − σ⁴)/n = 2σ⁴/n for a Gaussian (slightly less, discrete).
        ctx.z(float(x.astype(np.float64).var()), var, var * math.sqrt(2.5 / n), f"variance at σ={sigma}")
        edges = np.unique(np.round(np.array([-2.5, -1.5, -0.75, 0.0, 0.75, 1.5, 2.5]) * sigma).astype(np.int64))
        probs = discrete_gaussian_bin_probabilities(edges, sigma)
        observed = np.bincount(np.searchsorted(edges, x, side="right"), minlength=edges.size + 1)
        keep = probs * n >= 5
        ctx.chi_square(observed[keep], probs[keep] / probs[keep].sum() * observed[keep].sum(), f"pmf with tails at σ={sigma}")
    return None


# -- DDG encoder --------------------------------------------------------------------------------


def _encoder_round_trip(enc: Any, ctx: Ctx) -> str:
    cfg = enc.config
    n = ctx.samples(40)
    x = ctx.rng.normal((n, cfg.dim)) * 0.4
    codes = np.asarray(enc.encode(x, ctx.rng, noise=False))
    m = 1 << int(cfg.modulus_bits)
    require(codes.shape == (n, cfg.padded_dim), f"encode shape {codes.shape}, wanted {(n, cfg.padded_dim)}")
    require(codes.dtype == np.uint64 and int(codes.max()) < m, "encodings must be uint64 in [0, 2^b)")
    total = (codes.sum(axis=0, dtype=np.uint64) & np.uint64(m - 1))
    decoded = np.asarray(enc.decode_sum(total, n))
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    clipped = x * np.minimum(1.0, float(cfg.clip) / norms)
    error = float(np.linalg.norm(decoded - clipped.sum(axis=0)))
    bound = n * float(cfg.gamma) * math.sqrt(int(cfg.padded_dim))
    require(error <= bound, f"decoded sum is {error:.3g} from the clipped sum, quantization allows {bound:.3g}")
    centred = total.astype(np.int64)
    centred = np.where(centred >= m // 2, centred - m, centred)
    other = np.asarray(enc.unrotate(centred.astype(np.float64), scale=float(cfg.gamma)))
    require(np.allclose(other, decoded, rtol=0, atol=1e-9), "decode_sum differs from centring + unrotate (S_syn's batch path)")
    return f"{n} rows: error {error:.3g} <= {bound:.3g} (γ√d' per row); decode_sum == centre + unrotate"


def _encoder_noisy_within_bound(enc: Any, ctx: Ctx) -> str:
    cfg = enc.config
    n = ctx.samples(40)
    x = ctx.rng.normal((n, cfg.dim)) * 0.4
    m = 1 << int(cfg.modulus_bits)
    total = np.asarray(enc.encode(x, ctx.rng)).sum(axis=0, dtype=np.uint64) & np.uint64(m - 1)
    norm = float(np.linalg.norm(enc.decode_sum(total, n)))
    bound = float(enc.sum_norm_bound(n, n))
    require(norm <= bound, f"an honest noisy sum has norm {norm:.3g} > sum_norm_bound {bound:.3g}")
    return f"noisy sum norm {norm:.3g} <= sum_norm_bound {bound:.3g}"


# -- dummy generator ----------------------------------------------------------------------------


def _dummy_plan_shape(gen: Any, ctx: Ctx) -> str:
    for tau in (1.0, 2.0, 5.5, 10.0):
        plan = gen.dummy_plan(tau, ctx.rng)
        want = list(range(1, math.ceil(tau)))
        require(sorted(plan) == want, f"plan levels for τ={tau} are {sorted(plan)}, wanted {want}")
        require(all(isinstance(c, int) and c >= 0 for c in plan.values()), "plan counts must be ints >= 0")
    require(gen.dummy_plan(10.0, RandomSource.seeded(5)) == gen.dummy_plan(10.0, RandomSource.seeded(5)), "a seeded plan is not reproducible")
    return f"levels 1..⌈τ⌉−1, counts >= 0, seeded plans reproducible; shift {gen.shift}, ε0 {gen.epsilon0}, δ0 {gen.delta0}"


def _dummy_counts(gen: Any, ctx: Ctx) -> str:
    counts = np.concatenate([
        np.fromiter(gen.dummy_plan(51.0, ctx.rng).values(), dtype=np.int64) for _ in range(ctx.samples(200))
    ])
    n = counts.size
    ctx.z(float(counts.mean()), float(gen.shift), float(counts.std()) / math.sqrt(n), "mean count (shift)")
    pmf = getattr(gen, "pmf_vector", None)
    if pmf is not None:
        support = np.arange(0, int(counts.max()) + 2)
        probs = np.asarray(pmf(support), dtype=np.float64)
        obs, exp = pooled(np.bincount(counts, minlength=support.size)[: support.size], probs * n)
        ctx.chi_square(obs, exp * obs.sum() / exp.sum(), f"count distribution vs pmf_vector ({n} counts)")
    return None


# -- shuffler -----------------------------------------------------------------------------------


def _shuffle_permutes(sh: Any, ctx: Ctx) -> str:
    items = [object() for _ in range(33)]
    out = sh.shuffle(items, ctx.rng)
    require(isinstance(out, list) and len(out) == len(items), "shuffle must return a list of the same length")
    require(sorted(map(id, out)) == sorted(map(id, items)), "shuffle must return the very objects given, each once")
    require(sh.shuffle([], ctx.rng) == [], "shuffle([]) must be []")
    one = object()
    require(sh.shuffle([one], ctx.rng)[0] is one, "shuffle of one item")
    draws = {tuple(map(id, sh.shuffle(items, ctx.rng))) for _ in range(4)}
    require(len(draws) > 1, "four shuffles of 33 items gave the same order")
    return "same objects, once each; empty and single batches; orders vary"


def _shuffle_uniform(sh: Any, ctx: Ctx) -> str:
    size, trials = 6, ctx.samples(20000)
    items = list(range(size))
    first = np.empty(trials, dtype=np.int64)
    second = np.empty(trials, dtype=np.int64)
    rng = ctx.rng
    for t in range(trials):
        out = sh.shuffle(items, rng)
        first[t], second[t] = out.index(0), out.index(1)
    ctx.chi_square(np.bincount(first, minlength=size), np.full(size, trials / size), "position of item 0")
    cells = first * (size - 1) + np.where(second > first, second - 1, second)
    pairs = size * (size - 1)
    ctx.chi_square(np.bincount(cells, minlength=pairs), np.full(pairs, trials / pairs), "joint positions of items 0 and 1")
    return None


# -- channel ------------------------------------------------------------------------------------


def _channel_round_trip(ch: Any, ctx: Ctx) -> str:
    sk, pk = ch.generate_keypair(ctx.rng.child("key"))
    sizes = [0, 1, 31, 32, 33, 200, 1500]
    plains = [ctx.rng.random_bytes(k) for k in sizes]
    seals = ch.prepare_seals(pk, len(plains), ctx.rng.child("seals"))
    require(len(seals) == len(plains), "prepare_seals returned the wrong number of seals")
    cts = [ch.seal_prepared(s, p) for s, p in zip(seals, plains, strict=True)]
    lengths = [len(c) - len(p) for c, p in zip(cts, plains, strict=True)]
    require(set(lengths) == {int(ch.overhead)}, f"ciphertext − plaintext lengths {lengths}, overhead says {ch.overhead}")
    require(ch.try_open_many(sk, cts) == plains, "try_open_many did not return the plaintexts")
    try:
        ch.seal_prepared(seals[0], b"again")
    except ProtocolStateError:
        pass
    else:
        raise PropertyFailed("a prepared seal was accepted twice (nonce reuse)")
    again = ch.generate_keypair(ctx.rng.child("key"))
    require(again[1] == pk, "generate_keypair(rng) is not reproducible from a seeded source")
    return f"sizes {sizes}: ciphertext = plaintext + {ch.overhead} bytes; opened; single use; seeded keys reproducible"


def _channel_refuses_tampering(ch: Any, ctx: Ctx) -> str:
    sk, pk = ch.generate_keypair(ctx.rng.child("key"))
    _, other_pk = ch.generate_keypair(ctx.rng.child("other"))
    plain = ctx.rng.random_bytes(64)
    ct = ch.seal_prepared(ch.prepare_seals(pk, 1, ctx.rng.child("s"))[0], plain)
    bad: list[bytes] = []
    for at in sorted({0, 1, len(ct) // 2, len(ct) - int(ch.overhead) + 1, len(ct) - 1}):
        b = bytearray(ct)
        b[at] ^= 0x01
        bad.append(bytes(b))
    bad += [ct[:-1], ct[: int(ch.overhead) - 1], b"", ch.seal_prepared(ch.prepare_seals(other_pk, 1, ctx.rng.child("o"))[0], plain)]
    out = ch.try_open_many(sk, [ct, *bad])
    require(out[0] == plain, "the untouched ciphertext did not open")
    wrong = [i for i, o in enumerate(out[1:]) if not isinstance(o, DecodeError)]
    require(not wrong, f"tampered/truncated/misaddressed ciphertexts {wrong} were not refused with DecodeError")
    return f"{len(bad)} bit flips, truncations and a misaddressed box each refused in place"


def _channel_skip(ch: Any, ctx: Ctx) -> str:
    _, pk = ch.generate_keypair(ctx.rng.child("key"))
    plain = b"x" * 40
    full = [ch.seal_prepared(s, plain) for s in ch.prepare_seals(pk, 5, RandomSource.seeded(9, "skip"))]
    rng = RandomSource.seeded(9, "skip")
    ch.skip_seals(3, rng)
    rest = [ch.seal_prepared(s, plain) for s in ch.prepare_seals(pk, 2, rng)]
    require(rest == full[3:], "skip_seals(3) then prepare_seals(2) differs from the last two of prepare_seals(5)")
    return "seeded prepared seals reproducible; skip_seals skips exactly"


# -- broadcast ----------------------------------------------------------------------------------


def _broadcast_answers(enc: Any, ctx: Ctx) -> str:
    n = ctx.samples(300)
    tags = [ctx.rng.random_bytes(32) for _ in range(n)]
    counts = [int(c) for c in 1 + ctx.rng.integers_below(5000, n)]
    released = dict(zip(tags, counts, strict=True))
    loaded = enc.load(enc.build(released, ctx.rng.random_bytes(16)))
    reads = enc.heard_counts(released)
    above = [t.hex()[:12] for t, c in released.items() if not 1 <= reads.get(t, 0) <= c]
    require(not above and len(reads) == n, f"heard_counts: {len(above)} released tags read no count or one above it, e.g. {above[:3]}")
    wrong = [t.hex()[:12] for t in released if loaded.query(t) != reads[t]]
    require(not wrong, f"{len(wrong)} released tags answered another count than heard_counts says, e.g. {wrong[:3]}")
    require(len(loaded) == n, f"len() = {len(loaded)}, released {n}")
    absent = [ctx.rng.random_bytes(32) for _ in range(ctx.samples(2000))]
    hits = sum(loaded.query(t) is not None for t in absent)
    rate = float(loaded.false_positive_rate)
    # Binomial upper bound: mean + 6 sd + 1 (a one-sided 6-sigma test, about 1e-9).
    limit = len(absent) * rate + 6 * math.sqrt(len(absent) * rate) + 1
    require(hits <= limit, f"{hits} of {len(absent)} absent tags answered a count; stated rate {rate:.3g} allows {limit:.1f}")
    empty = enc.load(enc.build({}, b"\x00" * 16))
    require(len(empty) == 0 and empty.query(tags[0]) is None, "an empty release answers a tag")
    exact = sum(reads[t] == c for t, c in released.items())
    return f"{n} tags answered as heard_counts says ({exact} exact, none above); {hits}/{len(absent)} absent tags answered (stated rate {rate:.3g}); empty release"


PROPERTIES: dict[str, list[Prop]] = {
    "group": [
        Prop("serialize round trip", _group_round_trip),
        Prop("scalar and element algebra", _group_algebra),
        Prop("refuses invalid encodings", _group_refusals),
        Prop("RFC 9497 VOPRF vectors on this group", _group_rfc9497),
    ],
    "oprf": [
        Prop("RFC 9497 A.1.2 known answers", _oprf_vectors),
        Prop("per-element proofs round trip", _oprf_round_trip),
    ],
    "secret_sharing": [
        Prop("shares reconstruct", _sharing_reconstructs),
        Prop("each share is uniform", _sharing_uniform, statistical=True),
    ],
    "discrete_gaussian": [Prop("mean, variance and tails", _sampler_moments_and_tails, statistical=True)],
    "ddg_encoder": [
        Prop("encode/decode within quantization", _encoder_round_trip),
        Prop("noisy sums within sum_norm_bound", _encoder_noisy_within_bound),
    ],
    "dummy_generator": [
        Prop("plan shape", _dummy_plan_shape),
        Prop("count distribution", _dummy_counts, statistical=True),
    ],
    "shuffler": [
        Prop("is a permutation", _shuffle_permutes),
        Prop("is uniform", _shuffle_uniform, statistical=True),
    ],
    "channel": [
        Prop("round trip and fixed overhead", _channel_round_trip),
        Prop("refuses tampering", _channel_refuses_tampering),
        Prop("skip_seals skips exactly", _channel_skip),
    ],
    "broadcast": [Prop("answers released tags as heard_counts says, never above the count", _broadcast_answers)],
}


__all__ = ["ALPHA", "ConformanceError", "Outcome", "PROPERTIES", "Report", "build", "check", "check_all", "run_properties"]
