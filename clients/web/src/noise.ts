/**
 * The discrete Gaussian N_Z(0, σ²) as primitives/noise/fast.py samples it ("fast-vectorized",
 * the default component), from any byte source: for σ ≤ 64 the inverse cdf on |x| ≤ max(⌈12σ⌉, 8);
 * above, rounding with rejection (Z ~ N(0, σ²), X = round-half-even(Z), accepted when
 * |X| ≤ ⌈12σ⌉ and a uniform is below exp((Z − X)(Z + X)/2σ² − (⌈12σ⌉ + 1/4)/2σ²)). The draws
 * are Python's, in Python's order, so a recorded stream gives the recorded noise.
 */
import { type ByteSource, normalOf, uniformOf } from "./random.js";

const TABLE_MAX_SIGMA = 64.0;
const MAX_SIGMA = 2 ** 40;
const TAIL_SIGMAS = 12.0;
const CHUNK = 1 << 20;

function rintHalfEven(v: number): number {
  const r = Math.round(v); // half up
  return r - v === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

function table(s: number, n: number, source: ByteSource): bigint[] {
  const cut = Math.max(Math.ceil(TAIL_SIGMAS * s), 8);
  const cdf: number[] = [];
  let acc = 0;
  for (let x = -cut; x <= cut; x++) {
    acc += Math.exp(-(x * x) / (2.0 * s * s));
    cdf.push(acc);
  }
  const total = cdf[cdf.length - 1];
  for (let i = 0; i < cdf.length; i++) cdf[i] /= total;
  cdf[cdf.length - 1] = 1.0;
  const out: bigint[] = [];
  for (let start = 0; start < n; start += CHUNK) {
    for (const u of uniformOf(source, Math.min(n, start + CHUNK) - start)) {
      let lo = 0, hi = cdf.length; // first index with cdf > u
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (cdf[mid] > u) hi = mid;
        else lo = mid + 1;
      }
      out.push(BigInt(lo - cut));
    }
  }
  return out;
}

function roundedNormal(s: number, n: number, source: ByteSource): bigint[] {
  const cut = Math.ceil(TAIL_SIGMAS * s);
  const twoVar = 2.0 * s * s;
  const logK = (cut + 0.25) / twoVar;
  const acceptRate = Math.exp(-logK);
  const out: bigint[] = [];
  while (out.length < n) {
    const want = n - out.length;
    const m = Math.min(CHUNK, Math.trunc((want / acceptRate) * 1.01) + 32);
    const z = normalOf(source, m).map((v) => v * s);
    const u = uniformOf(source, m);
    for (let i = 0; i < m && out.length < n; i++) {
      const x = rintHalfEven(z[i]);
      const logRatio = ((z[i] - x) * (z[i] + x)) / twoVar - logK;
      if (Math.abs(x) <= cut && u[i] < Math.exp(logRatio)) out.push(BigInt(x));
    }
  }
  return out;
}

export function sampleDiscreteGaussian(sigma: number, size: number, source: ByteSource): bigint[] {
  if (!(sigma >= 0 && sigma <= MAX_SIGMA)) throw new Error(`sigma must be in [0, 2^40], got ${sigma}`);
  if (size === 0 || sigma === 0) return Array.from({ length: size }, () => 0n);
  return sigma <= TABLE_MAX_SIGMA ? table(sigma, size, source) : roundedNormal(sigma, size, source);
}
