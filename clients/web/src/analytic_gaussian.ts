/**
 * The analytic Gaussian mechanism's exact (ε, δ) curve (Balle & Wang 2018, Theorem 8), as
 * primitives/analytic_gaussian.py computes it: the DDG's analytic accountant bounds the discrete
 * sum by it (accountant.ts, analyticEpsilon).
 *
 * JavaScript has no erfc, and 1 − erf loses every digit in the tail the accountant lives in
 * (deltas of 1e-12 and below), so erfc here is W. J. Cody's rational Chebyshev approximations
 * (Math. Comp. 23, 1969; the three intervals and the coefficients of his CALERF): relative error
 * near 1 ulp from erfc(−6) = 2 to erfc(26.5) ≈ 1e-308. ln Φ agrees with Python's (glibc's erfc)
 * to ~1e-15 relative on the vectors' points (test/plan.test.ts states the tolerance).
 */

const SQRT2 = Math.sqrt(2.0);
const LOG_SQRT_2PI = 0.5 * Math.log(2.0 * Math.PI);
/** 1/√π */
const INV_SQRT_PI = 5.6418958354775628695e-1;
/** Above this erfc(x) underflows to 0 in float64. */
const ERFC_UNDERFLOW = 26.543;

// erf(x) = x·A(x²)/B(x²) for |x| ≤ 0.46875
const A = [3.1611237438705656, 113.86415415105016, 377.48523768530202, 3209.3775891384695, 0.18577770618460315];
const B = [23.601290952344122, 244.02463793444417, 1282.6165260773723, 2844.2368334391706];
// erfc(x) = e^{−x²}·C(x)/D(x) for 0.46875 < x ≤ 4
const C = [
  0.56418849698867009, 8.8831497943883759, 66.119190637141634, 298.63513819740013, 881.95222124176909,
  1712.0476126340706, 2051.0783778260715, 1230.3393547979972, 2.1531153547440383e-8,
];
const D = [
  15.744926110709835, 117.6939508913125, 537.18110186200986, 1621.3895745666902, 3290.7992357334596,
  4362.6190901432472, 3439.3676741437216, 1230.3393548037495,
];
// erfc(x) = e^{−x²}/x·(1/√π + P(1/x²)/(x²·Q(1/x²))) for x > 4
const P = [0.30532663496123236, 0.36034489994980445, 0.12578172611122925, 0.016083785148742275, 6.5874916152983678e-4, 0.016315387137302097];
const Q = [2.5685201922898682, 1.8729528499234604, 0.52790510295142837, 0.060518341312441319, 0.0023352049762686918];

/** e^{−y²}·r with y² split as s² + (y − s)(y + s), s = y to 1/16: s² is exact, so the large exponent carries no rounding. */
function scaledByGaussian(y: number, r: number): number {
  const s = Math.trunc(y * 16.0) / 16.0;
  const rest = (y - s) * (y + s);
  return Math.exp(-s * s) * Math.exp(-rest) * r;
}

/** erfc(x), with good relative accuracy deep in the upper tail (Cody 1969). */
export function erfc(x: number): number {
  if (Number.isNaN(x)) return NaN;
  const y = Math.abs(x);
  let result: number;
  if (y <= 0.46875) {
    const ysq = y > 1.11e-16 ? y * y : 0.0;
    let num = A[4] * ysq, den = ysq;
    for (let i = 0; i < 3; i++) {
      num = (num + A[i]) * ysq;
      den = (den + B[i]) * ysq;
    }
    return 1.0 - (x * (num + A[3])) / (den + B[3]);
  } else if (y <= 4.0) {
    let num = C[8] * y, den = y;
    for (let i = 0; i < 7; i++) {
      num = (num + C[i]) * y;
      den = (den + D[i]) * y;
    }
    result = scaledByGaussian(y, (num + C[7]) / (den + D[7]));
  } else if (y >= ERFC_UNDERFLOW) {
    result = 0.0;
  } else {
    const inv = 1.0 / (y * y);
    let num = P[5] * inv, den = inv;
    for (let i = 0; i < 4; i++) {
      num = (num + P[i]) * inv;
      den = (den + Q[i]) * inv;
    }
    const tail = (inv * (num + P[4])) / (den + Q[4]);
    result = scaledByGaussian(y, (INV_SQRT_PI - tail) / y);
  }
  return x < 0 ? 2.0 - result : result;
}

/** ln Φ(x), accurate in the far lower tail (erfc, then an asymptotic series below −30). */
export function logNormalCdf(x: number): number {
  if (x > -30.0) return Math.log(0.5 * erfc(-x / SQRT2));
  // Mills ratio: Φ(x) = φ(x)/|x| · (1 − 1/x² + 3/x⁴ − 15/x⁶ + ...), x ≪ 0.
  const x2 = x * x;
  const series = 1.0 - 1.0 / x2 + 3.0 / x2 ** 2 - 15.0 / x2 ** 3 + 105.0 / x2 ** 4;
  return -x2 / 2.0 - LOG_SQRT_2PI - Math.log(-x) + Math.log(series);
}

/** Φ(x) through erfc: no cancellation in the lower tail. */
export function normalCdf(x: number): number {
  return 0.5 * erfc(-x / SQRT2);
}

/**
 * Smallest δ for which N(0, σ²I) on an L2-sensitivity-Δ query is (ε, δ)-DP:
 * Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ), the second term as exp(ε + ln Φ(·)) so large ε
 * cannot overflow. The caller keeps σ, ε, Δ finite and > 0.
 */
export function agmDelta(sigma: number, epsilon: number, sensitivity: number): number {
  const a = sensitivity / (2.0 * sigma);
  const b = (epsilon * sigma) / sensitivity;
  const first = logNormalCdf(a - b);
  const second = epsilon + logNormalCdf(-a - b);
  if (second >= first) return 0.0; // only rounding gets here; the true value is >= 0
  return Math.exp(first) * -Math.expm1(second - first);
}

/**
 * Smallest ε ≥ 0 with agmDelta(σ, ε, Δ) ≤ δ, by bisection (agmDelta decreases in ε): the upper
 * end of the final bracket, hence always a valid ε; Infinity if no ε up to 1e6 reaches δ.
 */
export function agmEpsilon(sigma: number, delta: number, sensitivity: number, relTol = 1e-13): number {
  // ε → 0: δ(0) = Φ(a) − Φ(−a) = 1 − 2Φ(−a), a = Δ/(2σ).
  if (1.0 - 2.0 * normalCdf(-sensitivity / (2.0 * sigma)) <= delta) return 0.0;
  let lo = 0.0, hi = 1.0;
  while (agmDelta(sigma, hi, sensitivity) > delta) {
    [lo, hi] = [hi, 2.0 * hi];
    if (hi > 1e6) return Infinity;
  }
  while (hi - lo > relTol * hi) {
    const mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    if (agmDelta(sigma, mid, sensitivity) <= delta) hi = mid;
    else lo = mid;
  }
  return hi;
}

/**
 * Smallest m with agmDelta(m·Δ, ε, Δ) ≤ δ (independent of Δ), by bisection; the upper end of the
 * final bracket, hence always feasible; Infinity where no m up to 1e12 reaches δ (Python raises).
 */
export function agmMultiplier(epsilon: number, delta: number, relTol = 1e-13): number {
  let lo = 0.0, hi = 1.0;
  while (agmDelta(hi, epsilon, 1.0) > delta) {
    [lo, hi] = [hi, 2.0 * hi];
    if (hi > 1e12) return Infinity;
  }
  while (hi - lo > relTol * hi) {
    const mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    if (agmDelta(mid, epsilon, 1.0) <= delta) hi = mid;
    else lo = mid;
  }
  return hi;
}
