/**
 * The device's DDG encoding (primitives/ddg/encoder.py) with its coins and noise given: clip to
 * the L2 ball of radius ``clip``, pad to d', rotate (x·D then the normalized Walsh–Hadamard
 * transform, D = ±1 from RandomSource.seeded(rotation_seed, "ddg/rotation-signs")), scale by
 * 1/γ, round each coordinate up with probability its fractional part (a coin u < frac), add the
 * discrete Gaussian noise, reduce mod 2^b.
 */
import { fromHex } from "./bytes.js";
import { RandomSource } from "./random.js";

export interface DDGConfig {
  dim: number;
  padded_dim: number;
  gamma: number;
  sigma_int: number;
  modulus_bits: number;
  clip: number;
  beta: number;
  rotation_seed: string; // hex
  rotate: boolean;
  /** the bound σ_int was calibrated against, "analytic" or "rdp" (accountant.ts); the encoding does not read it */
  accountant: string;
}

export function rotationSigns(config: DDGConfig): number[] {
  return RandomSource.seeded(fromHex(config.rotation_seed), "ddg/rotation-signs")
    .integersBelow(2, config.padded_dim).map((b) => 1.0 - 2.0 * b);
}

/** Sylvester order: H[j][k] = (-1)^popcount(j & k). */
function hadamardSign(j: number, k: number): number {
  let v = j & k, parity = 0;
  while (v) {
    parity ^= v & 1;
    v >>= 1;
  }
  return parity ? -1 : 1;
}

function rotate(x: number[], config: DDGConfig): number[] {
  const d = config.padded_dim;
  const padded = Array.from({ length: d }, (_, i) => (i < x.length ? x[i] : 0));
  if (!config.rotate) return padded;
  const signs = rotationSigns(config);
  const y = padded.map((v, i) => v * signs[i]);
  // fwht: products with the scaled Sylvester matrix (the Python path for d' <= 32); larger d'
  // would run the butterflies, whose sums differ only in the last bits.
  const scale = 1.0 / Math.sqrt(d);
  return Array.from({ length: d }, (_, k) => {
    let acc = 0;
    for (let j = 0; j < d; j++) acc += y[j] * (hadamardSign(j, k) * scale);
    return acc;
  });
}

/** Steps 1–3: the rounded vector before noise, from ``coins`` (d' uniforms in [0, 1)). */
export function quantize(embedding: number[], config: DDGConfig, coins: number[]): bigint[] {
  if (config.beta > 0) throw new Error("conditional rounding (beta > 0) is not implemented here");
  const norm = Math.sqrt(embedding.reduce((s, v) => s + v * v, 0));
  const factor = Math.min(1.0, config.clip / Math.max(norm, 1e-300));
  const z = rotate(embedding.map((v) => v * factor), config).map((v) => v * (1.0 / config.gamma));
  if (coins.length !== z.length) throw new Error(`rounding needs ${z.length} coins, got ${coins.length}`);
  return z.map((v, i) => {
    const floor = Math.floor(v);
    return BigInt(floor) + (coins[i] < v - floor ? 1n : 0n);
  });
}

/** Step 4 and the reduction: (q + noise) mod 2^b. */
export function encode(quantized: bigint[], noise: bigint[], config: DDGConfig): bigint[] {
  const mask = (1n << BigInt(config.modulus_bits)) - 1n;
  return quantized.map((q, i) => (q + noise[i]) & mask);
}
