/**
 * A DP round's phase-2 plan (tests/vectors/ddg_plan/plans.json, written by the Python code a
 * device runs) replayed through this client's accountant: the budget's terms, γ and σ_int of
 * the DDG configuration, and each released count's m_h and σ_int,h.
 *
 * Tolerances. Not bit for bit by construction: V8's exp, log, log1p, expm1 and pow are not
 * glibc's or numpy's (1 ulp apart at places; 507 of the 8001 orders α differ in their last bit),
 * so the budget's terms agree to ~1e-15 and an ε to a few ulps. σ_int is the upper end of a
 * bisection to 1e-12 relative, so such a difference can move it by at most that bracket:
 * SIGMA_TOL = 1e-11. γ is the upper end of a bisection to 1e-6 relative whose every step asks
 * whether σ_int(γ) fits the ring: a step that lands within ulps of the ring's edge could go the
 * other way and move γ (and σ_int with it) by up to the final bracket, so GAMMA_TOL = 2e-6, and
 * σ_int at a γ that moved is compared at GAMMA_TOL too. The analytic accountant adds erfc (Cody's
 * here, glibc's in Python): ln Φ within LOG_CDF_TOL = 1e-15 relative (absolute where |ln Φ| < 1,
 * i.e. Φ itself to 1e-15), and its ε is the upper end of a bisection to 1e-13, well inside σ_int's
 * 1e-12 bracket, so SIGMA_TOL holds for both accountants. What must hold exactly, whatever these
 * differences: every σ_int this client returns meets the budget under this client's accountant.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  ALPHA_GRID, ANALYTIC_ACCOUNTANT, CountSizing, type DdgTarget, InfeasibleBudgetError, InvalidParameterError, RDP_ACCOUNTANT,
  aggregationBudget, clippedSensitivity, ddgEpsilon, dpDdgConfig, erf, honestContributors, pairwiseSum, roundParams,
  scalesExactly, sensitivity,
} from "../src/accountant.js";
import { logNormalCdf } from "../src/analytic_gaussian.js";
import type { DDGConfig } from "../src/ddg.js";
import { phase2Inputs } from "../src/plan.js";
import type { RoundDocument } from "../src/user.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const plans = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "ddg_plan", "plans.json"), "utf8"));
const device = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "user", "device.json"), "utf8"));

const BUDGET_TOL = 1e-13;
const SIGMA_TOL = 1e-11;
const GAMMA_TOL = 2e-6;
const LOG_CDF_TOL = 1e-15;

const relative = (a: number, b: number): number => (a === b ? 0 : Math.abs(a - b) / Math.abs(b));
const roundOf = (c: any): RoundDocument => ({ ...device.round, dim: c.round.dim, params: c.round.params, protocol: c.round.protocol });

/** Each case through this client once: the configuration phase2Inputs derives, and each count's σ_int,h. */
interface Replayed { config: DDGConfig; sigmas: number[] }
let replayedCases: Replayed[] | null = null;
function replayed(): Replayed[] {
  replayedCases ??= plans.cases.map((c: any) => {
    const round = roundOf(c);
    const first = phase2Inputs(round, c.max_count, c.counts[0].count);
    // phase2Inputs calibrates the configuration again at every call: the same sizing, once.
    const sizing = new CountSizing(round, first.ddgConfig);
    return { config: first.ddgConfig, sigmas: c.counts.map((s: any) => sizing.sigma(s.count)) };
  });
  return replayedCases!;
}

test("erf agrees with Python's math.erf", () => {
  for (const [x, value] of plans.erf) assert.ok(relative(erf(x), value) <= 1e-15, `erf(${x}) = ${erf(x)}, Python ${value}`);
});

test("ln Φ agrees with Python's log_normal_cdf, from the asymptotic series below −30 to the upper tail", (t) => {
  let largest = 0;
  for (const [x, value] of plans.log_normal_cdf) {
    const diff = Math.abs(logNormalCdf(x) - value) / Math.max(1, Math.abs(value));
    largest = Math.max(largest, diff);
    assert.ok(diff <= LOG_CDF_TOL, `ln Phi(${x}) = ${logNormalCdf(x)}, Python ${value}`);
  }
  t.diagnostic(`largest difference of ln Phi from Python (relative, absolute below 1): ${largest}`);
});

test("numpy's pairwise summation: blocks of 8 below 128 terms, halves above", () => {
  const terms = Float64Array.from({ length: 1000 }, (_, i) => 1 / (i + 1));
  let plain = 0;
  for (const t of terms) plain += t;
  // A different order of additions gives a different last bit here; numpy's gives this one.
  assert.equal(pairwiseSum(terms), 7.485470860550345);
  assert.notEqual(plain, pairwiseSum(terms));
  assert.equal(ALPHA_GRID.length, 8001);
  assert.equal(ALPHA_GRID[0], 1 + 1e-6);
  assert.equal(ALPHA_GRID[8000], 1e8 + 1);
});

test("the aggregation budget's terms agree with Python's", (t) => {
  let largest = 0;
  for (const c of plans.cases) {
    const b = aggregationBudget(roundParams(roundOf(c)));
    const got: Record<string, number> = {
      eps_fre: b.epsFre, delta_fre: b.deltaFre, delta_sens: b.deltaSens, eps_central: b.epsCentral,
      delta_central: b.deltaCentral, dummy_epsilon0: b.dummyEpsilon0, dummy_delta0: b.dummyDelta0, eps_agg: b.epsAgg,
      delta_agg: b.deltaAgg,
    };
    for (const [key, value] of Object.entries(c.budget)) {
      largest = Math.max(largest, relative(got[key], value as number));
      assert.ok(relative(got[key], value as number) <= BUDGET_TOL, `${c.name} ${key}: ${got[key]}, Python ${value}`);
    }
  }
  t.diagnostic(`largest relative difference of a budget term from Python: ${largest}`);
});

test("γ and σ_int of every case agree with Python's; each count's σ_int,h too", (t) => {
  let gammaMax = 0, sigmaMax = 0, countMax = 0;
  const paths = new Set<string>();
  plans.cases.forEach((c: any, i: number) => {
    const round = roundOf(c);
    const ddgConfig = replayed()[i].config;
    c.counts.forEach((sized: any, j: number) => {
      const sigmaInt = replayed()[i].sigmas[j];
      const { gamma, sigma_int: sigma, ...rest } = c.ddg_config;
      const { gamma: tsGamma, sigma_int: tsSigma, ...tsRest } = ddgConfig;
      assert.deepEqual(tsRest, rest, c.name);
      const dGamma = relative(tsGamma, gamma);
      gammaMax = Math.max(gammaMax, dGamma);
      assert.ok(dGamma <= GAMMA_TOL, `${c.name}: gamma ${tsGamma}, Python ${gamma}`);
      const tol = dGamma === 0 ? SIGMA_TOL : GAMMA_TOL;
      sigmaMax = Math.max(sigmaMax, relative(tsSigma, sigma));
      assert.ok(relative(tsSigma, sigma) <= tol, `${c.name}: sigma_int ${tsSigma}, Python ${sigma}`);
      countMax = Math.max(countMax, relative(sigmaInt, sized.sigma_int));
      assert.ok(relative(sigmaInt, sized.sigma_int) <= tol, `${c.name} count ${sized.count}: sigma_int ${sigmaInt}, Python ${sized.sigma_int}`);
      paths.add(sized.path);
    });
    // phase2Inputs for the largest count, and for cover (no released count: the configuration's σ_int).
    const last = c.counts.length - 1;
    assert.equal(phase2Inputs(round, c.max_count, c.counts[last].count).sigmaInt, replayed()[i].sigmas[last]);
    assert.equal(phase2Inputs(round, c.max_count, null).sigmaInt, ddgConfig.sigma_int);
  });
  assert.deepEqual([...paths].sort(), ["bisection", "floor", "scaled"]);
  t.diagnostic(`largest relative differences from Python: gamma ${gammaMax}, sigma_int ${sigmaMax}, sigma_int,h ${countMax}`);
});

test("each count's m_h, honest count and way to σ_int are Python's", () => {
  plans.cases.forEach((c: any, i: number) => {
    const round = roundOf(c), p = roundParams(round);
    const config = replayed()[i].config;
    const nRef = honestContributors(c.floor, p.dishonestFraction);
    for (const sized of c.counts) {
      assert.equal(honestContributors(sized.m, p.dishonestFraction), sized.n_honest, c.name);
      const guess = config.sigma_int * Math.sqrt(nRef / sized.n_honest);
      const path = sized.m === c.floor ? "floor"
        : scalesExactly(config.sigma_int, nRef, config.accountant) && scalesExactly(guess, sized.n_honest, config.accountant)
          ? "scaled" : "bisection";
      assert.equal(path, sized.path, `${c.name} count ${sized.count}`);
    }
  });
});

test("every σ_int this client returns meets the aggregation budget under this client's accountant", () => {
  plans.cases.forEach((c: any, i: number) => {
    const p = roundParams(roundOf(c));
    const budget = aggregationBudget(p);
    const ddgConfig = replayed()[i].config;
    c.counts.forEach((sized: any, j: number) => {
      const sigmaInt = replayed()[i].sigmas[j];
      const target: DdgTarget = {
        gamma: ddgConfig.gamma, sensitivity: clippedSensitivity(sensitivity(p), ddgConfig.clip),
        paddedDim: ddgConfig.padded_dim, delta: budget.deltaAgg, beta: ddgConfig.beta, accountant: ddgConfig.accountant,
      };
      const eps = ddgEpsilon(sigmaInt, sized.n_honest, target);
      assert.ok(eps <= budget.epsAgg, `${c.name} count ${sized.count}: epsilon ${eps} > ${budget.epsAgg}`);
      // Python's ε at its own σ_int, which the vector records, meets its budget too.
      assert.ok(sized.epsilon <= c.budget.eps_agg, `${c.name}: Python's epsilon ${sized.epsilon}`);
      // The least: 1e-9 less noise is over the budget (the bisection's bracket is 1e-12).
      assert.ok(ddgEpsilon(sigmaInt * (1 - 1e-9), sized.n_honest, target) > budget.epsAgg, `${c.name} count ${sized.count}: not the least`);
    });
  });
});

test("the user-side vector's DP round: the device's configuration and σ_int are the recorded ones", () => {
  const released = device.cases.find((c: any) => c.name === "released");
  const maxCount = 47; // the broadcast's counts: 21, 30, 47 and the device's 25
  const { ddgConfig, sigmaInt } = phase2Inputs(device.round, maxCount, released.derived.count);
  const { gamma, sigma_int: sigma, ...rest } = released.derived.ddg_config;
  const { gamma: tsGamma, sigma_int: tsSigma, ...tsRest } = ddgConfig;
  // The vector predates the config's accountant key; its round, without ddg_accountant, is rdp.
  assert.equal(rest.accountant, undefined);
  assert.deepEqual(tsRest, { ...rest, accountant: RDP_ACCOUNTANT });
  assert.ok(relative(tsGamma, gamma) <= GAMMA_TOL);
  assert.ok(relative(tsSigma, sigma) <= SIGMA_TOL);
  assert.ok(relative(sigmaInt, released.derived.sigma_int) <= SIGMA_TOL);
});

test("settings this client cannot account for are refused, naming the parameter", () => {
  const c = plans.cases[0];
  const round = (params: object, protocol: object = {}): RoundDocument =>
    ({ ...roundOf(c), params: { ...c.round.params, ...params }, protocol: { ...c.round.protocol, ...protocol } });
  assert.throws(() => phase2Inputs(round({}, { future_knob: 1 }), 10, null),
    (e: Error) => e instanceof InvalidParameterError && /protocol has fields this client does not know: \[future_knob\]/.test(e.message));
  assert.throws(() => phase2Inputs(round({}, { noise_calibration: "median" }), 10, null),
    { name: "InvalidParameterError", message: `noise_calibration must be one of ['count', 'floor'], got "median"` });
  assert.throws(() => phase2Inputs(round({}, { ddg_accountant: "moments" }), 10, null),
    { name: "InvalidParameterError", message: `ddg_accountant must be one of ['analytic', 'rdp'], got "moments"` });
  assert.throws(() => phase2Inputs(round({}, { ddg_accountant: null }), 10, null),
    { name: "InvalidParameterError", message: "ddg_accountant must be one of ['analytic', 'rdp'], got null" });
  assert.throws(() => phase2Inputs(round({}, { dropout_allowance: 1.5 }), 10, null),
    { name: "InvalidParameterError", message: "dropout_allowance must be a number in [0, 1), got 1.5" });
  assert.throws(() => phase2Inputs(round({}, { clip: 2.0 }), 10, null), /ProtocolConfig.clip must equal FreParams.clip/);
  assert.throws(() => phase2Inputs(round({ budget_factor: 20.0 }), 10, null),
    (e: Error) => e instanceof InfeasibleBudgetError && /epsilon budget exhausted/.test(e.message));
  assert.throws(() => phase2Inputs(round({ threshold: 10 }), 10, null),
    (e: Error) => e instanceof InfeasibleBudgetError && /delta budget exhausted/.test(e.message));
  assert.throws(() => phase2Inputs(round({}, { dummy_epsilon0: 5.0 }), 10, null),
    (e: Error) => e instanceof InfeasibleBudgetError && /must not exceed the heavy-hitter term/.test(e.message));
  assert.throws(() => phase2Inputs(round({ p_sample: 1.0 }), 10, null),
    { name: "InvalidParameterError", message: "p_sample must be in (0, 1) for finite epsilon, got 1" });
});

test("a round document without ddg_accountant predates it and is read as rdp", () => {
  const i = plans.cases.findIndex((c: any) => c.name === "eps8_d384_paper_rdp");
  const c = plans.cases[i];
  const { ddg_accountant: recorded, ...protocol } = c.round.protocol;
  assert.equal(recorded, RDP_ACCOUNTANT);
  const round: RoundDocument = { ...roundOf(c), protocol };
  assert.equal(roundParams(round).ddgAccountant, RDP_ACCOUNTANT);
  assert.deepEqual(dpDdgConfig(round, c.max_count), replayed()[i].config);
});

test("the analytic accountant needs less noise than RDP alone for the same round (~6% at epsilon 8)", (t) => {
  const c = plans.cases.find((c: any) => c.name === "eps8_d384_paper_rdp");
  const withAccountant = (accountant: string): RoundDocument =>
    ({ ...roundOf(c), protocol: { ...c.round.protocol, ddg_accountant: accountant } });
  const rdp = dpDdgConfig(withAccountant(RDP_ACCOUNTANT), c.max_count);
  const analytic = dpDdgConfig(withAccountant(ANALYTIC_ACCOUNTANT), c.max_count);
  assert.equal(analytic.accountant, ANALYTIC_ACCOUNTANT);
  const ratio = analytic.sigma_int / rdp.sigma_int;
  assert.ok(ratio < 0.96, `analytic sigma_int ${analytic.sigma_int}, rdp ${rdp.sigma_int}`);
  // The analytic bound is what meets the budget: RDP alone at that σ_int does not.
  const p = roundParams(withAccountant(ANALYTIC_ACCOUNTANT)), budget = aggregationBudget(p);
  const target: DdgTarget = {
    gamma: analytic.gamma, sensitivity: clippedSensitivity(sensitivity(p), analytic.clip), paddedDim: analytic.padded_dim,
    delta: budget.deltaAgg, beta: analytic.beta, accountant: RDP_ACCOUNTANT,
  };
  assert.ok(ddgEpsilon(analytic.sigma_int, c.floor, target) > budget.epsAgg);
  t.diagnostic(`sigma_int analytic / rdp: ${ratio} (gamma ${analytic.gamma} / ${rdp.gamma})`);
});

test("a round with epsilon inf keeps the noiseless plan", () => {
  const round = { ...device.round, params: { ...device.round.params, epsilon: "inf", p_sample: 1.0 } };
  const { ddgConfig, sigmaInt } = phase2Inputs(round, 47, 25);
  assert.equal(sigmaInt, 0);
  assert.equal(ddgConfig.sigma_int, 0);
});
