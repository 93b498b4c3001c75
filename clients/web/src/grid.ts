/**
 * The public grid (mechanism/grid.py) as one device uses it: Z ~ N(0,1)^{d×k} (float32) from the
 * public stream "public/projection", offsets o = U[0,1)^k · L from "public/offsets", and the
 * canonical bucket b_j = floor(((s_j / √k) − o_j) / L), s_j the correctly rounded sum of the
 * exact products x_p·Z_pj (x rounded to float32). Encoded as k big-endian int64.
 */
import { RandomSource } from "./random.js";

export interface GridParams {
  k: number;
  radius: number;
  edge_multiplier: number;
}

/** Python's math.fsum: the correctly rounded sum (Shewchuk's partials, round-half-even fix). */
export function fsum(values: number[]): number {
  const partials: number[] = [];
  for (let x of values) {
    let i = 0;
    for (let y of partials) {
      if (Math.abs(x) < Math.abs(y)) [x, y] = [y, x];
      const hi = x + y;
      const lo = y - (hi - x);
      if (lo !== 0) partials[i++] = lo;
      x = hi;
    }
    partials.length = i;
    partials.push(x);
  }
  let n = partials.length;
  let hi = 0;
  if (n > 0) {
    hi = partials[--n];
    let lo = 0;
    while (n > 0) {
      const x = hi;
      const y = partials[--n];
      hi = x + y;
      const yr = hi - x;
      lo = y - yr;
      if (lo !== 0) break;
    }
    if (n > 0 && ((lo < 0 && partials[n - 1] < 0) || (lo > 0 && partials[n - 1] > 0))) {
      const y = lo * 2;
      const x = hi + y;
      const yr = x - hi;
      if (y === yr) hi = x;
    }
  }
  return hi;
}

function nextDown(x: number): number {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  view.setBigUint64(0, view.getBigUint64(0) - 1n); // x > 0
  return view.getFloat64(0);
}

export function bucketEncoding(embedding: number[], publicSeed: Uint8Array, params: GridParams): Uint8Array {
  const d = embedding.length, k = params.k;
  const edge = (params.edge_multiplier * 2.0 * params.radius) / Math.sqrt(k);
  const z = RandomSource.seeded(publicSeed, "public/projection").normal(d * k).map(Math.fround);
  const offsets = RandomSource.seeded(publicSeed, "public/offsets").uniform(k).map((u) => Math.min(u * edge, nextDown(edge)));
  const x = embedding.map(Math.fround);
  const out = new Uint8Array(8 * k);
  const view = new DataView(out.buffer);
  for (let j = 0; j < k; j++) {
    const s = fsum(x.map((xp, p) => xp * z[p * k + j]));
    const b = Math.floor((s / Math.sqrt(k) - offsets[j]) / edge);
    view.setBigInt64(8 * j, BigInt(b), false);
  }
  return out;
}
