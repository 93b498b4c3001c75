/**
 * Seed-compressed additive sharing mod 2^b (primitives/sharing/seeded.py): the first share is a
 * 32-byte seed s, worth G(s) = the first d' words of AES-256-CTR keyed by s from the counter block
 * SHA-256("fre-e2t/sharing/seed-expand/v1" || b)[:8] || 0^8 (words of 1, 2, 4 or 8 bytes, little-
 * endian, masked to b bits); the second is x − G(s) mod 2^b, as ⌈b/8⌉-byte little-endian words.
 */
import { ctr } from "@noble/ciphers/aes.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { concat, utf8 } from "./bytes.js";

const EXPAND_DOMAIN = utf8("fre-e2t/sharing/seed-expand/v1");
export const SEED_SIZE = 32;

const streamWordBytes = (bits: number): number => [1, 2, 4, 8].find((w) => bits <= 8 * w) ?? 0;
export const wordBytes = (bits: number): number => Math.ceil(bits / 8);

export function compresses(dim: number, bits: number): boolean {
  return dim * wordBytes(bits) > SEED_SIZE;
}

export function shareSizes(dim: number, bits: number): [number, number] {
  const explicit = dim * wordBytes(bits);
  return [compresses(dim, bits) ? SEED_SIZE : explicit, explicit];
}

export function expandSeed(seed: Uint8Array, dim: number, bits: number): bigint[] {
  const width = streamWordBytes(bits);
  const counter = concat(sha256(concat(EXPAND_DOMAIN, new Uint8Array([bits]))).slice(0, 8), new Uint8Array(8));
  const raw = ctr(seed, counter).encrypt(new Uint8Array(dim * width));
  const mask = (1n << BigInt(bits)) - 1n;
  return Array.from({ length: dim }, (_, i) => {
    let v = 0n;
    for (let b = width - 1; b >= 0; b--) v = (v << 8n) | BigInt(raw[i * width + b]);
    return v & mask;
  });
}

export function packWords(values: bigint[], width: number): Uint8Array {
  const out = new Uint8Array(values.length * width);
  values.forEach((v, i) => {
    let x = v;
    for (let b = 0; b < width; b++) {
      out[i * width + b] = Number(x & 0xffn);
      x >>= 8n;
    }
  });
  return out;
}

/** The two shares' wire bytes: (seed, packed x − G(seed) mod 2^b). */
export function share(values: bigint[], bits: number, seed: Uint8Array): [Uint8Array, Uint8Array] {
  if (!compresses(values.length, bits)) throw new Error("explicit-only sharing (a share no longer than a seed) is not implemented here");
  const mask = (1n << BigInt(bits)) - 1n;
  const g = expandSeed(seed, values.length, bits);
  return [seed.slice(), packWords(values.map((x, i) => (x - g[i]) & mask), wordBytes(bits))];
}
