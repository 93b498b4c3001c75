/**
 * The project's RandomSource (primitives/randomness.py), for the public randomness a device
 * derives from the round's public seed: material = SHA-256("fre-e2t/seed/v2" || tag || seed),
 * stream key = HKDF-SHA256(material, salt "fre-e2t/random-source/v2", info = each path component
 * as its 8-byte big-endian UTF-8 length then its bytes), stream = AES-256-CTR from a zero
 * counter block. The draws (uint64, uniform, normal, integersBelow) read the stream exactly as
 * the Python methods do.
 */
import { ctr } from "@noble/ciphers/aes.js";
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { concat, u64be, utf8 } from "./bytes.js";

const SEED_DOMAIN = utf8("fre-e2t/seed/v2");
const HKDF_SALT = utf8("fre-e2t/random-source/v2");
const TWO_POW_MINUS_53 = 2 ** -53;

export type Seed = bigint | number | string | Uint8Array;

function taggedSeed(seed: Seed): Uint8Array {
  if (seed instanceof Uint8Array) return concat(utf8("b"), seed);
  if (typeof seed === "string") return concat(utf8("s"), utf8(seed));
  let v = BigInt(seed);
  if (v < 0n) throw new Error("seed must be non-negative");
  const bytes: number[] = [];
  do {
    bytes.unshift(Number(v & 0xffn));
    v >>= 8n;
  } while (v > 0n);
  return concat(utf8("i"), Uint8Array.from(bytes));
}

function encodePath(path: readonly string[]): Uint8Array {
  return concat(...path.flatMap((c) => [u64be(BigInt(utf8(c).length)), utf8(c)]));
}

/** Anything that yields uniform bytes: a RandomSource stream, the OS's CSPRNG, a recorded tape. */
export interface ByteSource {
  randomBytes(n: number): Uint8Array;
}

/** The operating system's CSPRNG (crypto.getRandomValues, 64 KiB at a time). */
export const cryptoBytes: ByteSource = {
  randomBytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let at = 0; at < n; at += 65536) globalThis.crypto.getRandomValues(out.subarray(at, Math.min(n, at + 65536)));
    return out;
  },
};

/** ``n`` 53-bit uniforms in [0, 1) from ``source`` (RandomSource.uniform). */
export const uniformOf = (source: ByteSource, n: number): number[] => uniformFromBytes(source.randomBytes(8 * n));

/** Box-Muller on 53-bit uniforms, as RandomSource.normal (JS's log/cos/sin may differ from
 * numpy's in the last bit; callers that round, as the public grid and the noise sampler do,
 * absorb it except with negligible probability). */
export function normalOf(source: ByteSource, size: number): number[] {
  const half = Math.ceil(size / 2);
  const u1 = uniformOf(source, half).map((u) => 1.0 - u);
  const u2 = uniformOf(source, half);
  const radius = u1.map((u) => Math.sqrt(-2.0 * Math.log(u)));
  const angle = u2.map((u) => 2.0 * Math.PI * u);
  const z = [...radius.map((r, i) => r * Math.cos(angle[i])), ...radius.map((r, i) => r * Math.sin(angle[i]))];
  return z.slice(0, size);
}

export class RandomSource implements ByteSource {
  private readonly key: Uint8Array;
  private buffer: Uint8Array = new Uint8Array(0);
  private used = 0;
  private blocks = 0n;

  private constructor(private readonly material: Uint8Array, readonly path: readonly string[]) {
    this.key = hkdf(sha256, material, HKDF_SALT, encodePath(path), 32);
  }

  static seeded(seed: Seed, label = ""): RandomSource {
    return new RandomSource(sha256(concat(SEED_DOMAIN, taggedSeed(seed))), [label]);
  }

  child(label: string): RandomSource {
    return new RandomSource(this.material, [...this.path, label]);
  }

  randomBytes(n: number): Uint8Array {
    while (this.buffer.length - this.used < n) {
      const want = Math.max(64, Math.ceil((n - (this.buffer.length - this.used)) / 16));
      const counter = new Uint8Array(16);
      let c = this.blocks;
      for (let i = 15; i >= 0 && c > 0n; i--) {
        counter[i] = Number(c & 0xffn);
        c >>= 8n;
      }
      const stream = ctr(this.key, counter).encrypt(new Uint8Array(16 * want));
      this.buffer = concat(this.buffer.subarray(this.used), stream);
      this.used = 0;
      this.blocks += BigInt(want);
    }
    const out = this.buffer.slice(this.used, this.used + n);
    this.used += n;
    return out;
  }

  uint64(n: number): bigint[] {
    const raw = this.randomBytes(8 * n);
    const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    return Array.from({ length: n }, (_, i) => view.getBigUint64(8 * i, true));
  }

  uniform(n: number): number[] {
    return uniformOf(this, n);
  }

  normal(size: number): number[] {
    return normalOf(this, size);
  }

  /** ``n`` integers uniform below ``bound`` (a power of two here: no rejection), as integers_below. */
  integersBelow(bound: number, n: number): number[] {
    if (bound & (bound - 1)) throw new Error("only powers of two are needed by the device");
    const draw = this.uint64(Math.floor(n * 1.05) + 8);
    return draw.slice(0, n).map((v) => Number(v % BigInt(bound)));
  }
}

/** 53-bit uniforms from 8-byte little-endian words: (u64 >> 11) · 2^-53. */
export function uniformFromBytes(raw: Uint8Array): number[] {
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  return Array.from({ length: raw.length / 8 }, (_, i) => Number(view.getBigUint64(8 * i, true) >> 11n) * TWO_POW_MINUS_53);
}
