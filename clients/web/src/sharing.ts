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

/** Uniform bytes the sharing of ``dim`` values draws: a seed, or the explicit mask's stream. */
export const shareRandomBytes = (dim: number, bits: number): number =>
  compresses(dim, bits) ? SEED_SIZE : dim * streamWordBytes(bits);

/** The two shares' wire bytes from ``random`` (shareRandomBytes of them): (seed, packed
 * x − G(seed)) when a seed is shorter, else both explicit, (mask, x − mask) with the mask read
 * from ``random`` as G's words are (primitives/sharing/ring2k.py). */
export function share(values: bigint[], bits: number, random: Uint8Array): [Uint8Array, Uint8Array] {
  const dim = values.length;
  if (random.length !== shareRandomBytes(dim, bits)) throw new Error(`sharing needs ${shareRandomBytes(dim, bits)} random bytes`);
  const mask = (1n << BigInt(bits)) - 1n;
  const width = streamWordBytes(bits);
  const g = compresses(dim, bits)
    ? expandSeed(random, dim, bits)
    : Array.from({ length: dim }, (_, i) => {
      let v = 0n;
      for (let b = width - 1; b >= 0; b--) v = (v << 8n) | BigInt(random[i * width + b]);
      return v & mask;
    });
  const second = packWords(values.map((x, i) => (x - g[i]) & mask), wordBytes(bits));
  return [compresses(dim, bits) ? random.slice() : packWords(g, wordBytes(bits)), second];
}
