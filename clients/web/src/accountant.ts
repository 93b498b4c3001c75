/**
 * The privacy accounting a device needs for a DP round's phase 2, read from the round document
 * as the Python device reads it:
 *
 * - the round's settings (``params`` and ``protocol``), checked as FreParams and ProtocolConfig
 *   check them (mechanism/params.py, fre_protocol/roles/config.py);
 * - the aggregation budget: CalibrateNoise's (eps_agg, delta_agg) with Lemma 1 in closed form and
 *   Lemma 2, less what the histogram release costs beyond Lemma 1 with the TSDLap dummies at
 *   (2ε0, 2δ0) (mechanism/accounting.py; fre_protocol/roles/ledger.py, aggregation_budget and
 *   dummy_parameters);
 * - the DDG accountant the round's ``protocol.ddg_accountant`` names: ``"rdp"``, KLS21's RDP
 *   bound alone (Prop. 14, the min of three; converted to (ε, δ) over the same grid of orders),
 *   or ``"analytic"``, the min of it and the analytic bound (the sum of discrete Gaussians
 *   against a smoothed rounding of the continuous Gaussian, whose (ε, δ) is the analytic
 *   Gaussian mechanism's: analytic_gaussian.ts). A document without the key predates it and is
 *   read as ``"rdp"``, the accountant that calibrated it;
 * - the calibration of σ_int by bisection under that accountant, then of the finest γ whose
 *   aggregate fits the ring (primitives/ddg/accounting.py, calibrate_ddg with a given modulus);
 *   the configuration records the accountant;
 * - the count sizing n_h → m_h → σ_int,h (fre_protocol/roles/noise_plan.py, CountSizing): both
 *   calibrations, the dropout allowance and the dishonest fraction, with the exact √ scaling
 *   where the accountant depends on n·σ_int² alone (scalesExactly) and the bisection elsewhere.
 *
 * Plain JS numbers where Python uses floats, in the same order of operations; numpy's pairwise
 * summation where Python sums with numpy. Not bit for bit: V8's exp, log, log1p, expm1 and pow
 * are not glibc's or numpy's, nor is Cody's erfc glibc's, so a value can differ in its last bits,
 * and a bisection step that lands that close to the budget can then go the other way. Every
 * σ_int returned here meets the budget under the round's accountant: it is the upper end of a
 * bisection bracket, or a scaled value checked (and stepped up) against it.
 */
import { agmEpsilon, agmMultiplier } from "./analytic_gaussian.js";
import { hex, utf8 } from "./bytes.js";
import type { DDGConfig } from "./ddg.js";
import type { RoundDocument } from "./user.js";

export const DEFAULT_ROTATION_SEED = hex(utf8("fre-e2t/ddg/rotation/v1"));
/** Scaled inputs must stay where float64 holds every integer (primitives/ddg/encoder.py). */
const MAX_SCALED_NORM = 2 ** 50;
/** The largest σ_int the noise sampler takes (primitives/noise/fast.py). */
const MAX_SIGMA = 2 ** 40;

/** A setting outside what the round (or this client) allows: names it, what was expected, what came. */
export class InvalidParameterError extends Error {
  override name = "InvalidParameterError";
}

/** The budget cannot be met with these settings. */
export class InfeasibleBudgetError extends Error {
  override name = "InfeasibleBudgetError";
}

// -- the round's settings ------------------------------------------------------------------------

export const COUNT_CALIBRATION = "count";
export const FLOOR_CALIBRATION = "floor";
/** The DDG accountants (primitives/ddg/encoder.py, ACCOUNTANTS): KLS21's RDP bound alone, or the min of it and the analytic bound. */
export const RDP_ACCOUNTANT = "rdp";
export const ANALYTIC_ACCOUNTANT = "analytic";
const ACCOUNTANTS = [ANALYTIC_ACCOUNTANT, RDP_ACCOUNTANT];

/** FreParams and the accounting's part of ProtocolConfig, as the round document carries them. */
export interface RoundParams {
  epsilon: number;
  delta: number;
  radius: number;
  threshold: number;
  k: number;
  pSample: number;
  budgetFactor: number;
  sensitivityRatio: number;
  edgeMultiplier: number;
  clip: number;
  dummyEpsilon0: number | null;
  dummyDelta0: number | null;
  protocolClip: number | null;
  modulusBits: number;
  modulusStddevs: number;
  dishonestFraction: number;
  noiseCalibration: string;
  dropoutAllowance: number;
  ddgAccountant: string;
}

// Each field with its default (FreParams, ProtocolConfig): a document lacking one loads with it.
const PARAMS_DEFAULTS: Record<string, unknown> = {
  epsilon: 8.0, delta: 1e-6, radius: 0.5, threshold: 100, k: 20, p_sample: 0.5, budget_factor: 4.0,
  sensitivity_ratio: 2.4, edge_multiplier: 1.0, rounding: "exact", clip: 1.0,
};
const PROTOCOL_DEFAULTS: Record<string, unknown> = {
  proof_batch_size: 1, user_workers: null, dummy_epsilon0: null, dummy_delta0: null, clip: null, modulus_bits: 24,
  cover_traffic: true, chunk_size: 1024, dishonest_fraction: 0.0, modulus_stddevs: 8.0,
  noise_calibration: COUNT_CALIBRATION,
  // Not ProtocolConfig's defaults (topup with f = 0, and analytic): a document without these keys
  // was written when withhold with f = 0.1 and RDP alone were the defaults, and is read as such
  // (ProtocolConfig.from_dict, which RoundSettings.from_dict calls).
  dropout_policy: "withhold", dropout_allowance: 0.1, ddg_accountant: RDP_ACCOUNTANT,
};

const shown = (value: unknown): string => (value === undefined ? "nothing" : JSON.stringify(value));
const isNumber = (value: unknown): value is number => typeof value === "number";

function known(section: string, data: Record<string, unknown>, defaults: Record<string, unknown>): Record<string, unknown> {
  // A field this client does not know may change the accounting: fail closed, naming it.
  const unknown = Object.keys(data).filter((key) => !(key in defaults)).sort();
  if (unknown.length > 0) {
    throw new InvalidParameterError(
      `the round document's ${section} has fields this client does not know: [${unknown.join(", ")}] ` +
      `(expected some of [${Object.keys(defaults).sort().join(", ")}])`);
  }
  return { ...defaults, ...data };
}

function positive(name: string, value: unknown): number {
  if (!isNumber(value) || !Number.isFinite(value) || !(value > 0)) throw new InvalidParameterError(`${name} must be a finite number > 0, got ${shown(value)}`);
  return value;
}

function integer(name: string, value: unknown, low: number, high = Number.MAX_SAFE_INTEGER): number {
  if (!isNumber(value) || !Number.isInteger(value) || value < low || value > high) {
    const range = high === Number.MAX_SAFE_INTEGER ? `>= ${low}` : `in [${low}, ${high}]`;
    throw new InvalidParameterError(`${name} must be an integer ${range}, got ${shown(value)}`);
  }
  return value;
}

function fraction(name: string, value: unknown): number {
  if (!isNumber(value) || !Number.isFinite(value) || !(value >= 0 && value < 1)) throw new InvalidParameterError(`${name} must be a number in [0, 1), got ${shown(value)}`);
  return value;
}

function optionalPositive(name: string, value: unknown): number | null {
  return value === null ? null : positive(name, value);
}

/** Whether the round's ε is finite (a DP round); ``"inf"`` is the non-DP reference. */
export function isDp(round: RoundDocument): boolean {
  const epsilon = (round.params as Record<string, unknown>).epsilon;
  return isNumber(epsilon) && Number.isFinite(epsilon);
}

/** The round's privacy parameters and protocol choices, checked as the Python settings check them. */
export function roundParams(round: RoundDocument): RoundParams {
  const p = known("params", round.params as Record<string, unknown>, PARAMS_DEFAULTS);
  const c = known("protocol", round.protocol, PROTOCOL_DEFAULTS);
  const epsilon = p.epsilon === "inf" || p.epsilon === "Infinity" || p.epsilon === null ? Infinity : p.epsilon;
  if (!isNumber(epsilon) || !(epsilon > 0)) throw new InvalidParameterError(`epsilon must be > 0 (or "inf"), got ${shown(p.epsilon)}`);
  if (!isNumber(p.delta) || !(p.delta > 0 && p.delta < 1)) throw new InvalidParameterError(`delta must be in (0, 1), got ${shown(p.delta)}`);
  const pSample = p.p_sample;
  if (!isNumber(pSample) || !(pSample > 0 && pSample <= 1)) throw new InvalidParameterError(`p_sample must be in (0, 1], got ${shown(pSample)}`);
  if (Number.isFinite(epsilon) && pSample >= 1) throw new InvalidParameterError(`p_sample must be in (0, 1) for finite epsilon, got ${shown(pSample)}`);
  if (p.rounding !== "exact" && p.rounding !== "paper") throw new InvalidParameterError(`rounding must be 'exact' or 'paper', got ${shown(p.rounding)}`);
  const dummyDelta0 = optionalPositive("dummy_delta0", c.dummy_delta0);
  if (dummyDelta0 !== null && !(dummyDelta0 < 0.5)) throw new InvalidParameterError(`dummy_delta0 must be in (0, 0.5), got ${shown(dummyDelta0)}`);
  if (!isNumber(c.modulus_stddevs) || !(c.modulus_stddevs >= 1)) throw new InvalidParameterError(`modulus_stddevs must be >= 1, got ${shown(c.modulus_stddevs)}`);
  if (c.noise_calibration !== COUNT_CALIBRATION && c.noise_calibration !== FLOOR_CALIBRATION) {
    throw new InvalidParameterError(`noise_calibration must be one of ['count', 'floor'], got ${shown(c.noise_calibration)}`);
  }
  if (typeof c.ddg_accountant !== "string" || !ACCOUNTANTS.includes(c.ddg_accountant)) {
    throw new InvalidParameterError(`ddg_accountant must be one of ['analytic', 'rdp'], got ${shown(c.ddg_accountant)}`);
  }
  return {
    epsilon, delta: p.delta, radius: positive("radius", p.radius), threshold: integer("threshold", p.threshold, 1),
    k: integer("k", p.k, 1), pSample, budgetFactor: positive("budget_factor", p.budget_factor),
    sensitivityRatio: positive("sensitivity_ratio", p.sensitivity_ratio), edgeMultiplier: positive("edge_multiplier", p.edge_multiplier),
    clip: positive("clip", p.clip), dummyEpsilon0: optionalPositive("dummy_epsilon0", c.dummy_epsilon0), dummyDelta0,
    protocolClip: optionalPositive("protocol clip", c.clip), modulusBits: integer("modulus_bits", c.modulus_bits, 8, 62),
    modulusStddevs: c.modulus_stddevs, dishonestFraction: fraction("dishonest_fraction", c.dishonest_fraction),
    noiseCalibration: c.noise_calibration, dropoutAllowance: fraction("dropout_allowance", c.dropout_allowance),
    ddgAccountant: c.ddg_accountant,
  };
}

/** τ = p_s·t (t when ε = ∞). */
function tau(p: RoundParams): number {
  return (Number.isFinite(p.epsilon) ? p.pSample : 1.0) * p.threshold;
}

/** The smallest released count: ⌈τ − 1e-9·max(1, |τ|)⌉, at least 1 (mechanism/fre_e2t.py). */
export function releaseFloor(p: RoundParams): number {
  const t = tau(p);
  return Math.max(1, Math.max(0, Math.ceil(t - 1e-9 * Math.max(1.0, Math.abs(t)))));
}

/** Δ = min(u·r, 2C). */
export function sensitivity(p: RoundParams): number {
  return Math.min(p.sensitivityRatio * p.radius, 2.0 * p.clip);
}

/** The DDG encoder's clip, C; a protocol clip that differs from it is refused (ledger.py, ddg_clip). */
export function ddgClip(p: RoundParams): number {
  if (p.protocolClip !== null && p.protocolClip !== p.clip) {
    throw new InvalidParameterError(
      `ProtocolConfig.clip must equal FreParams.clip (the C of Δ = min(u·r, 2C)) or be None, got clip ${p.protocolClip} against FreParams.clip ${p.clip}`);
  }
  return p.clip;
}

/** max(1, ⌊(1 − f)·⌈τ⌉⌋) honest users of ``floor`` contributors (⌈τ⌉ itself at f = 0). */
export function honestContributors(floor: number, dishonestFraction: number): number {
  if (dishonestFraction === 0) return floor;
  return Math.max(1, Math.floor((1.0 - dishonestFraction) * floor + 1e-9));
}

/** m_h: ⌈τ⌉ under "floor"; max(⌈τ⌉, ⌊(1 − f)·n_h⌋) under "count". */
export function sizedContributors(count: number, floor: number, calibration: string, dropoutAllowance: number): number {
  if (calibration === FLOOR_CALIBRATION) return floor;
  return Math.max(floor, Math.floor((1.0 - dropoutAllowance) * count + 1e-9));
}

// -- the aggregation budget (mechanism/accounting.py, fre_protocol/roles/ledger.py) ---------------

/** erf, from the series 2/√π·e^{−z²}·Σ 2^n z^{2n+1}/(2n+1)!! whose terms are all positive. */
export function erf(z: number): number {
  if (z < 0) return -erf(-z);
  if (z >= 6) return 1.0; // 1 − erf(6) < 2.2e-17: 1 in float64
  const z2 = 2 * z * z;
  let term = z, sum = z;
  for (let n = 1; n < 400; n++) {
    term *= z2 / (2 * n + 1);
    const next = sum + term;
    if (next === sum) break;
    sum = next;
  }
  return (2 / Math.sqrt(Math.PI)) * Math.exp(-z * z) * sum;
}

function klBernoulli(q: number, p: number): number {
  let out = 0.0;
  if (q > 0) out += q * Math.log(q / p);
  if (q < 1) out += (1 - q) * Math.log((1 - q) / (1 - p));
  return out;
}

/** Lemma 1 in closed form: eps_fre = v·ln(1/(1 − p_s)), delta_fre = exp(−(τ/q)·D(q‖p_s)). */
export function heavyHitters(p: RoundParams): [number, number] {
  const eps = p.budgetFactor * -Math.log1p(-p.pSample);
  const q = -Math.expm1((p.budgetFactor + 1) * Math.log1p(-p.pSample));
  return [eps, Math.exp(-(tau(p) / q) * klBernoulli(q, p.pSample))];
}

/** Two points in one coordinate of the shifted grid: erf(x/√2) − sqrt(2/π)(1 − e^{−x²/2})/x. */
function collisionProbability(x: number): number {
  if (x < 1e-4) return x * Math.sqrt(2.0 / Math.PI) * (0.5 - (x * x) / 24.0);
  return erf(x / Math.sqrt(2.0)) - (Math.sqrt(2.0 / Math.PI) * -Math.expm1((-x * x) / 2.0)) / x;
}

/** δ_sens: 0 when the clip's diameter 2C ≤ u·r, else Lemma 2's f(2·m_L/u)^k. */
export function sensitivityFailure(p: RoundParams): number {
  if (2.0 * p.clip <= p.sensitivityRatio * p.radius) return 0.0;
  return collisionProbability((2.0 * p.edgeMultiplier) / p.sensitivityRatio) ** p.k;
}

/** Every term of the DP round's budget, in the order Python forms them. */
export interface Budget {
  epsFre: number;
  deltaFre: number;
  deltaSens: number;
  /** CalibrateNoise's (ε − eps_fre, δ − delta_fre − delta_sens) */
  epsCentral: number;
  deltaCentral: number;
  /** the TSDLap dummies' (ε0, δ0) */
  dummyEpsilon0: number;
  dummyDelta0: number;
  /** what the DDG centroid sums may spend */
  epsAgg: number;
  deltaAgg: number;
}

/** S_syn's view of all counts: max(eps_fre, ln 1/(1−p_s), ln(1 − p_s + p_s·e^{ε_d})), delta_fre + p_s·δ_d. */
function histogramReleaseCost(epsFre: number, deltaFre: number, pSample: number, dummyEps: number, dummyDelta: number): [number, number] {
  const amplified = Number.isFinite(dummyEps) ? Math.log1p(pSample * Math.expm1(dummyEps)) : Infinity;
  return [Math.max(epsFre, -Math.log1p(-pSample), amplified), deltaFre + pSample * dummyDelta];
}

/** The aggregation budget of a DP round (ledger.py: aggregation_budget at dummy_parameters). */
export function aggregationBudget(p: RoundParams): Budget {
  if (!Number.isFinite(p.epsilon)) throw new InvalidParameterError("a round with epsilon = inf has no aggregation budget");
  const [epsFre, deltaFre] = heavyHitters(p);
  const deltaSens = sensitivityFailure(p);
  const epsCentral = p.epsilon - epsFre;
  if (epsCentral <= 0) {
    throw new InfeasibleBudgetError(
      `epsilon budget exhausted: eps_fre = v*ln(1/(1-p_s)) = ${epsFre} (budget_factor=${p.budgetFactor}, p_sample=${p.pSample}) is >= epsilon = ${p.epsilon}`);
  }
  const deltaCentral = p.delta - deltaFre - deltaSens;
  if (deltaCentral <= 0) {
    throw new InfeasibleBudgetError(
      `delta budget exhausted: delta = ${p.delta} but delta_fre = ${deltaFre} and delta_sens = ${deltaSens} leave delta_agg = ${deltaCentral} <= 0`);
  }
  const eps0 = p.dummyEpsilon0 ?? epsFre / 2;
  const delta0 = p.dummyDelta0 ?? deltaFre / 2;
  // The dummies' (2ε0, 2δ0) must fit under Lemma 1's term (ledger.py, _check_dummy_budget).
  if (2 * eps0 > epsFre * (1 + 1e-9) || 2 * delta0 > deltaFre * (1 + 1e-9)) {
    throw new InfeasibleBudgetError(
      `dummy (2·epsilon0, 2·delta0) = (${2 * eps0}, ${2 * delta0}) must not exceed the heavy-hitter term (eps_fre, delta_fre) = (${epsFre}, ${deltaFre}) of the budget`);
  }
  const [histEps, histDelta] = histogramReleaseCost(epsFre, deltaFre, p.pSample, 2 * eps0, 2 * delta0);
  const epsAgg = epsCentral - (histEps - epsFre);
  const deltaAgg = deltaCentral - (histDelta - deltaFre);
  if (!(epsAgg > 0 && deltaAgg > 0)) {
    throw new InfeasibleBudgetError(`the dummies leave no aggregation budget: (eps_agg, delta_agg) = (${epsAgg}, ${deltaAgg})`);
  }
  return { epsFre, deltaFre, deltaSens, epsCentral, deltaCentral, dummyEpsilon0: eps0, dummyDelta0: delta0, epsAgg, deltaAgg };
}

// -- the DDG accountant (primitives/ddg/accounting.py) --------------------------------------------

const GRID_SIZE = 8001;

/** 1 + np.geomspace(1e-6, 1e8, 8001): 10**linspace(−6, 8) with the ends exact. */
function alphaGrid(): Float64Array {
  const start = Math.log10(1e-6), stop = Math.log10(1e8);
  const step = (stop - start) / (GRID_SIZE - 1);
  const out = new Float64Array(GRID_SIZE);
  for (let i = 0; i < GRID_SIZE; i++) {
    const power = i === 0 ? 1e-6 : i === GRID_SIZE - 1 ? 1e8 : 10 ** (i * step + start);
    out[i] = 1.0 + power;
  }
  return out;
}

/** The orders α and what the conversion needs of them alone: ln(1 − 1/α), ln α, α − 1. */
export const ALPHA_GRID = alphaGrid();
const LOG1P_INV = ALPHA_GRID.map((a) => Math.log1p(-1.0 / a));
const LOG_ALPHA = ALPHA_GRID.map((a) => Math.log(a));
const ALPHA_LESS_ONE = ALPHA_GRID.map((a) => a - 1.0);

/** numpy's pairwise summation of a float64 array (its order of additions, blocks of 8 and 128). */
export function pairwiseSum(a: Float64Array, from = 0, n = a.length): number {
  if (n < 8) {
    let res = 0.0;
    for (let i = 0; i < n; i++) res += a[from + i];
    return res;
  }
  if (n <= 128) {
    const r = [0, 1, 2, 3, 4, 5, 6, 7].map((j) => a[from + j]);
    let i = 8;
    for (; i < n - (n % 8); i += 8) for (let j = 0; j < 8; j++) r[j] += a[from + i + j];
    let res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[from + i];
    return res;
  }
  let half = Math.floor(n / 2);
  half -= half % 8;
  return pairwiseSum(a, from, half) + pairwiseSum(a, from + half, n - half);
}

/** KLS21 Thm. 1: τ = 10 Σ_{k=1}^{n−1} exp(−2π² σ_int² k/(k+1)) (0 for n = 1). */
export function tauDdg(sigmaInt: number, n: number): number {
  if (n === 1) return 0.0;
  const c = -2.0 * (Math.PI * Math.PI) * sigmaInt * sigmaInt;
  const terms = new Float64Array(n - 1);
  for (let k = 1; k < n; k++) terms[k - 1] = Math.exp((c * k) / (k + 1.0));
  return 10.0 * pairwiseSum(terms);
}

/** L2 bound after randomized rounding: min(c + √d, sqrt(c² + d/4 + sqrt(2 ln(1/β))(c + √d/2))), the first alone at β = 0. */
function roundedL2Bound(c: number, dim: number, beta: number): number {
  const rootD = Math.sqrt(dim);
  const first = c + rootD;
  if (beta === 0.0) return first;
  return Math.min(first, Math.sqrt(c * c + dim / 4.0 + Math.sqrt(2.0 * Math.log(1.0 / beta)) * (c + rootD / 2.0)));
}

/** min(Δ, 2·clip): clipped vectors differ by at most the diameter. */
export function clippedSensitivity(sens: number, clip: number): number {
  return Math.min(sens, 2.0 * clip);
}

/** What the accountant takes besides σ_int and n. */
export interface DdgTarget {
  gamma: number;
  /** Δ in embedding units, already capped at 2·clip */
  sensitivity: number;
  paddedDim: number;
  delta: number;
  beta: number;
  /** RDP_ACCOUNTANT or ANALYTIC_ACCOUNTANT */
  accountant: string;
}

// -- the analytic bound (primitives/ddg/accounting.py, analytic_epsilon) --------------------------

/** Variances a of the smoothing kernel tried by analyticEpsilon; each gives a valid bound. */
export const SMOOTHING_VARIANCES = [0.25, 0.5, 1.0, 2.0, 4.0];
/** Summands of sumRatioBounds taken one by one; the rest are bounded by the last. */
const EXACT_STEPS = 4096;

/**
 * θ(s²) = 2/expm1(2π² s²) ≥ 2 Σ_{m≥1} exp(−2π² s² m²): a discrete Gaussian's normaliser against
 * the continuous one's (0 once s² > 35.9); the factor keeps it above the series when both round.
 */
export function thetaExcess(variance: number): number {
  return (2.0 / Math.expm1(2.0 * (Math.PI * Math.PI) * variance)) * (1.0 + 1e-12);
}

/**
 * (A, B) with e^{−A} ≤ p_n(x)/g_{nσ²}(x) ≤ e^{B} for every integer x: the sum of ``n``
 * N_Z(0, σ²) against N_Z(0, nσ²), by induction on k (one convolution a step); Infinity where a
 * θ(w²) reaches 1. The first 4096 steps one by one (numpy's pairwise sums), the rest bounded by the last.
 */
export function sumRatioBounds(sigmaInt: number, n: number): [number, number] {
  const s2 = sigmaInt * sigmaInt;
  if (n <= 1) return [0.0, 0.0];
  if (s2 === 0.0) return [Infinity, Infinity];
  const steps = Math.min(n, EXACT_STEPS + 1) - 1;
  const lower = new Float64Array(steps), upper = new Float64Array(steps);
  const theta1 = thetaExcess(s2);
  for (let i = 0; i < steps; i++) {
    const k = i + 1;
    const thetaW = thetaExcess((k * s2) / (k + 1.0));
    if (thetaW >= 1.0) return [Infinity, Infinity];
    upper[i] = Math.log1p(thetaExcess((k + 1.0) * s2)) + Math.log1p(thetaW);
    lower[i] = -Math.log1p(-thetaW) + Math.log1p(thetaExcess(k * s2)) + Math.log1p(theta1);
  }
  const rest = n - 1 - steps; // steps EXACT_STEPS + 1 .. n − 1, each below the last one's
  return [pairwiseSum(lower) + rest * lower[steps - 1], pairwiseSum(upper) + rest * upper[steps - 1]];
}

/**
 * ε at ``delta`` of the sum of ``n`` users' N_Z(0, σ_int²)^{d'} on an integer query of L2
 * sensitivity ``l2Bound`` (Δ̂₂): the sum is within sumRatioBounds of N_Z(0, s²), s² = nσ², which
 * is within θ-factors of the smoothed rounding of the continuous N(0, s² − a); so ε is the
 * analytic Gaussian's at σ_c = √(s² − a) and δ·e^{−U}, plus U + L (the d' coordinates' log
 * ratio bounds). The least over SMOOTHING_VARIANCES; Infinity if none applies.
 */
export function analyticEpsilon(sigmaInt: number, n: number, paddedDim: number, l2Bound: number, delta: number): number {
  const s2 = n * (sigmaInt * sigmaInt);
  if (s2 === 0.0) return Infinity;
  const [lowerSum, upperSum] = sumRatioBounds(sigmaInt, n);
  const thetaS = thetaExcess(s2);
  let best = Infinity;
  for (const a of SMOOTHING_VARIANCES) {
    const thetaA = thetaExcess(a);
    if (a >= s2 || thetaA >= 1.0 || !Number.isFinite(upperSum)) continue;
    const upper = paddedDim * (upperSum + Math.log1p(thetaA));
    const lower = paddedDim * (lowerSum - Math.log1p(-thetaA) + Math.log1p(thetaS));
    const deltaC = delta * Math.exp(-upper);
    if (!(deltaC > 0.0 && deltaC < 1.0)) continue;
    const eps = agmEpsilon(Math.sqrt(s2 - a), deltaC, l2Bound) + upper + lower;
    if (eps < best) best = eps;
  }
  return best;
}

/**
 * Whether the accountant's ε at (σ_int, n) depends on them only through n·σ_int² (so σ_int for
 * another n follows by √ scaling): τ_DDG underflows and, for the analytic accountant, so does
 * θ(σ_int²/2), which bounds every step of sumRatioBounds.
 */
export function scalesExactly(sigmaInt: number, n: number, accountant: string): boolean {
  if (tauDdg(sigmaInt, n) !== 0.0) return false;
  return accountant === RDP_ACCOUNTANT || thetaExcess((sigmaInt * sigmaInt) / 2.0) === 0.0;
}

/** ε of the DDG sum of ``n`` contributors at σ_int: KLS21's RDP bound, or under the analytic accountant the less of it and analyticEpsilon. */
export function ddgEpsilon(sigmaInt: number, n: number, t: DdgTarget): number {
  if (sigmaInt === 0.0) return Infinity;
  const d = t.paddedDim;
  const l2Bound = roundedL2Bound(t.sensitivity / t.gamma, d, t.beta);
  const eps = rdpEpsilon(sigmaInt, n, t, l2Bound);
  if (t.accountant !== ANALYTIC_ACCOUNTANT) return eps;
  return Math.min(eps, analyticEpsilon(sigmaInt, n, d, l2Bound, t.delta));
}

/** KLS21 Prop. 14 (the min of three), converted to (ε, δ) at the least ε over the orders. */
function rdpEpsilon(sigmaInt: number, n: number, t: DdgTarget, l2Bound: number): number {
  const d = t.paddedDim;
  const l1Bound = l2Bound * Math.min(Math.sqrt(d), l2Bound);
  const tau = tauDdg(sigmaInt, n);
  const l2 = l2Bound / (Math.sqrt(n) * sigmaInt);
  const l1 = l1Bound / (Math.sqrt(n) * sigmaInt);
  const firstAdd = tau * d;
  const secondSum = l2 * l2 + 2.0 * l1 * tau + tau * tau * d;
  const thirdBase = l2 + Math.sqrt(d) * tau;
  const thirdSquare = thirdBase * thirdBase;
  const logDelta = Math.log(t.delta);
  let best = Infinity;
  for (let i = 0; i < GRID_SIZE; i++) {
    const half = ALPHA_GRID[i] / 2.0;
    const rdp = Math.min(Math.min(half * l2 * l2 + firstAdd, half * secondSum), half * thirdSquare);
    let eps = rdp + LOG1P_INV[i] - (logDelta + LOG_ALPHA[i]) / ALPHA_LESS_ONE[i];
    if (Number.isNaN(eps)) eps = Infinity;
    if (eps < best) best = eps;
  }
  return Math.max(0.0, best);
}

/**
 * The least σ_int meeting ``epsilon`` under the analytic accountant by inverting its bound, where
 * that is exact (θ(σ_int²/2) underflows: every ratio term of the sum is 0), as Python's
 * _analytic_sigma_int; null elsewhere, or where RDP already meets ``epsilon`` at that σ_int.
 */
function analyticSigmaInt(epsilon: number, n: number, t: DdgTarget): number | null {
  const l2Bound = roundedL2Bound(t.sensitivity / t.gamma, t.paddedDim, t.beta);
  const d = t.paddedDim;
  let best = Infinity;
  for (const a of SMOOTHING_VARIANCES) {
    const thetaA = thetaExcess(a);
    const upper = d * Math.log1p(thetaA), lower = -d * Math.log1p(-thetaA);
    const epsC = epsilon - upper - lower, deltaC = t.delta * Math.exp(-upper);
    if (epsC <= 0.0 || !(deltaC > 0.0 && deltaC < 1.0)) continue;
    const sigmaC = agmMultiplier(epsC, deltaC) * l2Bound;
    if (!Number.isFinite(sigmaC)) continue;
    best = Math.min(best, Math.sqrt((sigmaC * sigmaC + a) / n));
  }
  if (!Number.isFinite(best) || best > MAX_SIGMA || thetaExcess((best * best) / 2.0) !== 0.0) return null;
  return rdpEpsilon(best, n, t, l2Bound) <= epsilon ? null : best;
}

/**
 * The least σ_int (to ``relTol``) with ddgEpsilon ≤ ``epsilon`` under ``t.accountant``: bisection
 * in log scale, the upper end; under the analytic accountant, its exact inverse where there is one
 * (checked against the accountant, raised by 1e-12 steps if rounding left it a hair above).
 */
export function calibrateSigmaInt(epsilon: number, n: number, t: DdgTarget, relTol = 1e-12): number {
  const epsAt = (s: number): number => ddgEpsilon(s, n, t);
  if (t.accountant === ANALYTIC_ACCOUNTANT) {
    let direct = analyticSigmaInt(epsilon, n, t);
    for (let i = 0; direct !== null && i < 64; i++) {
      if (epsAt(direct) <= epsilon) return direct;
      direct *= 1.0 + 1e-12;
    }
  }
  const guess = (t.sensitivity * Math.sqrt(2.0 * Math.log(1.25 / t.delta))) / epsilon / (t.gamma * Math.sqrt(n));
  let hi = Math.max(guess, 1e-3);
  while (epsAt(hi) > epsilon) {
    hi *= 2.0;
    if (hi > MAX_SIGMA) throw new InfeasibleBudgetError(`epsilon = ${epsilon} needs sigma_int above 2^40 at gamma = ${t.gamma}; raise epsilon or gamma`);
  }
  let lo = hi / 2.0;
  while (epsAt(lo) <= epsilon) {
    [hi, lo] = [lo, lo / 2.0];
    if (lo < 1e-12) return hi;
  }
  while (hi / lo - 1.0 > relTol) {
    const mid = Math.sqrt(lo * hi);
    if (mid <= lo || mid >= hi) break;
    if (epsAt(mid) <= epsilon) hi = mid;
    else lo = mid;
  }
  if (hi > MAX_SIGMA) throw new InfeasibleBudgetError(`epsilon = ${epsilon} needs sigma_int = ${hi} > 2^40 at gamma = ${t.gamma}; raise epsilon or gamma`);
  return hi;
}

/** The integer range holding k standard deviations of an aggregate coordinate (KLS21 §4.4), rotated. */
export function aggregateRange(gamma: number, sigmaInt: number, clip: number, paddedDim: number, n: number, k: number): number {
  const flat = 1.0 / paddedDim;
  const local = gamma * sigmaInt;
  const variance = flat * (clip * clip) * n * n + ((gamma * gamma) / 4.0 + local * local) * n;
  return (2.0 * k * Math.sqrt(variance)) / gamma;
}

/** What calibrate_ddg is given by ddg_config_for. */
export interface CalibrationTarget {
  epsilon: number;
  delta: number;
  sensitivity: number;
  clip: number;
  dim: number;
  paddedDim: number;
  n: number;
  nModulus: number;
  kStddevs: number;
  modulusBits: number;
  accountant: string;
}

/**
 * calibrate_ddg with the modulus fixed (as ddg_config_for calls it): the finest γ whose aggregate
 * of ``nModulus`` users still fits k standard deviations into 2^b, σ_int calibrated at each γ tried.
 */
export function calibrateDdg(target: CalibrationTarget): DDGConfig {
  const sens = clippedSensitivity(target.sensitivity, target.clip);
  const sigmaAt = new Map<number, number>();
  const limit = 2 ** target.modulusBits;
  const fits = (gamma: number): boolean => {
    if (!sigmaAt.has(gamma)) {
      sigmaAt.set(gamma, calibrateSigmaInt(target.epsilon, target.n,
        { gamma, sensitivity: sens, paddedDim: target.paddedDim, delta: target.delta, beta: 0.0, accountant: target.accountant }));
    }
    return aggregateRange(gamma, sigmaAt.get(gamma)!, target.clip, target.paddedDim, target.nModulus, target.kStddevs) <= limit;
  };
  const config = (gamma: number): DDGConfig => {
    const sigmaInt = sigmaAt.get(gamma)!;
    if (target.clip / gamma + Math.sqrt(target.paddedDim) > MAX_SCALED_NORM) {
      throw new InvalidParameterError(`gamma = ${gamma} is too fine for clip ${target.clip}: scaled norms would exceed 2^50`);
    }
    return {
      dim: target.dim, padded_dim: target.paddedDim, gamma, sigma_int: sigmaInt, modulus_bits: target.modulusBits,
      clip: target.clip, beta: 0.0, rotation_seed: DEFAULT_ROTATION_SEED, rotate: true, accountant: target.accountant,
    };
  };
  let hi = target.clip;
  while (!fits(hi)) {
    hi *= 4.0;
    if (hi > 1e6 * target.clip) {
      throw new InfeasibleBudgetError(
        `modulus_bits = ${target.modulusBits} cannot hold ${target.kStddevs} standard deviations of a sum of ${target.nModulus} users at (epsilon = ${target.epsilon}, delta = ${target.delta}); raise modulus_bits`);
    }
  }
  const floorGamma = (2.0 * (target.clip + Math.sqrt(target.paddedDim))) / MAX_SCALED_NORM;
  let lo = hi / 4.0;
  while (lo > floorGamma && fits(lo)) [hi, lo] = [lo, lo / 4.0];
  if (lo <= floorGamma) {
    lo = floorGamma;
    if (fits(lo)) return config(lo);
  }
  while (hi / lo - 1.0 > 1e-6) {
    const mid = Math.sqrt(lo * hi);
    if (fits(mid)) hi = mid;
    else lo = mid;
  }
  return config(hi);
}

/** 2^⌈log2 d⌉ */
export function paddedDimension(dim: number): number {
  let padded = 1;
  while (padded < dim) padded *= 2;
  return padded;
}

/**
 * A DP round's DDG configuration (ledger.py, ddg_config_for's DP branch): σ_int calibrated to
 * the aggregation budget at the honest count of the release floor ⌈τ⌉, the ring holding the
 * aggregate of ``nModulus`` users (the broadcast's largest count, at least the floor).
 */
export function dpDdgConfig(round: RoundDocument, maxCount: number): DDGConfig {
  const p = roundParams(round);
  const floor = releaseFloor(p);
  const budget = aggregationBudget(p);
  return calibrateDdg({
    epsilon: budget.epsAgg, delta: budget.deltaAgg, sensitivity: sensitivity(p), clip: ddgClip(p), dim: round.dim,
    paddedDim: paddedDimension(round.dim), n: honestContributors(floor, p.dishonestFraction),
    nModulus: Math.max(maxCount > 0 ? maxCount : floor, floor), kStddevs: p.modulusStddevs, modulusBits: p.modulusBits,
    accountant: p.ddgAccountant,
  });
}

// -- the count sizing (fre_protocol/roles/noise_plan.py) ------------------------------------------

/** n_h → m_h → σ_int,h at a round's public parameters and DDG configuration (CountSizing). */
export class CountSizing {
  readonly params: RoundParams;
  readonly floor: number;
  readonly calibration: string;
  private readonly memo = new Map<number, number>();

  constructor(round: RoundDocument, readonly ddgConfig: DDGConfig) {
    // σ_int,h is calibrated against the configuration's accountant, as Python's sigma_for does.
    if (!ACCOUNTANTS.includes(ddgConfig.accountant)) {
      throw new InvalidParameterError(`the DDG configuration's accountant must be one of ['analytic', 'rdp'], got ${shown(ddgConfig.accountant)}`);
    }
    this.params = roundParams(round);
    this.floor = releaseFloor(this.params);
    this.calibration = Number.isFinite(this.params.epsilon) ? this.params.noiseCalibration : FLOOR_CALIBRATION;
  }

  /** m_h for a released count n_h. */
  users(count: number): number {
    return sizedContributors(count, this.floor, this.calibration, this.params.dropoutAllowance);
  }

  /** σ_int,h for a released count n_h (the configuration's at the floor). */
  sigma(count: number): number {
    const m = this.users(count);
    if (m === this.floor || !Number.isFinite(this.params.epsilon)) return this.ddgConfig.sigma_int;
    if (!this.memo.has(m)) this.memo.set(m, this.sigmaFor(m));
    return this.memo.get(m)!;
  }

  /**
   * The least σ_int for ``m`` contributors at the configuration's γ (noise_plan.py, _calibrated):
   * where the accountant depends on σ_int and n only through n·σ_int² at the floor's σ_int and
   * at the scaled one (scalesExactly), the floor's σ_int times √(n_floor/n), checked against the
   * accountant (raised by 1e-12 relative steps if it is a hair above the budget); else bisection.
   */
  private sigmaFor(m: number): number {
    const p = this.params, config = this.ddgConfig;
    const budget = aggregationBudget(p);
    const target: DdgTarget = {
      gamma: config.gamma, sensitivity: clippedSensitivity(sensitivity(p), config.clip), paddedDim: config.padded_dim,
      delta: budget.deltaAgg, beta: config.beta, accountant: config.accountant,
    };
    const n = honestContributors(m, p.dishonestFraction);
    const nRef = honestContributors(this.floor, p.dishonestFraction), sigmaRef = config.sigma_int;
    let guess = sigmaRef * Math.sqrt(nRef / n);
    if (sigmaRef > 0 && scalesExactly(sigmaRef, nRef, config.accountant) && scalesExactly(guess, n, config.accountant)) {
      for (let i = 0; i < 64; i++) {
        if (ddgEpsilon(guess, n, target) <= budget.epsAgg) return guess;
        guess *= 1.0 + 1e-12;
      }
    }
    return calibrateSigmaInt(budget.epsAgg, n, target);
  }
}
