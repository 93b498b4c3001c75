/**
 * The compact broadcast as a device queries it (docs/compact-broadcast.md, "ribbon"): the
 * CompactBroadcast message's body in the RCB1 format, queried for one tag.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { concat, utf8 } from "./bytes.js";
import { decodeCompactBroadcast } from "./messages.js";

const KEY_DOMAIN = utf8("fre-e2t/compact/key/v1");
const MASK64 = (1n << 64n) - 1n;
const GOLDEN = 0x9e3779b97f4a7c15n;
const WIDTH = 64;

export function murmur64(h0: bigint): bigint {
  let h = h0;
  h ^= h >> 33n;
  h = (h * 0xff51afd7ed558ccdn) & MASK64;
  h ^= h >> 33n;
  h = (h * 0xc4ceb9fe1a85ec53n) & MASK64;
  return h ^ (h >> 33n);
}

export function key64(tag: Uint8Array): bigint {
  const d = sha256(concat(KEY_DOMAIN, tag));
  return new DataView(d.buffer, d.byteOffset, 8).getBigUint64(0, true);
}

export interface HeardBroadcast {
  encoding: string;
  maxCount: number;
  query(tag: Uint8Array): number | null;
}

/** Load a CompactBroadcast in the round's encoding (``ribbon`` or ``ribbon-32``). */
export function hear(message: Uint8Array, expected: string): HeardBroadcast {
  const { encoding, maxCount, body } = decodeCompactBroadcast(message);
  if (encoding !== expected) throw new Error(`the broadcast is in ${encoding}, the round's encoding is ${expected}`);
  if (!encoding.startsWith("ribbon")) throw new Error(`encoding ${encoding} is not implemented here`);
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  if (body.length < 24 || new TextDecoder().decode(body.subarray(0, 4)) !== "RCB1") throw new Error("not a ribbon broadcast");
  const f = body[4], v = body[5];
  if (body[6] !== WIDTH || body[7] !== 0 || ![8, 16, 32].includes(f) || ![8, 16, 32].includes(v)) throw new Error("bad ribbon header");
  const seed = view.getBigUint64(8, true), n = view.getUint32(16, true), m = view.getUint32(20, true);
  if (body.length !== 24 + (m * (f + v)) / 8) throw new Error("ribbon broadcast has the wrong length");
  const slot = (offset: number, bits: number, i: number): bigint =>
    BigInt(bits === 8 ? view.getUint8(offset + i) : bits === 16 ? view.getUint16(offset + 2 * i, true) : view.getUint32(offset + 4 * i, true));
  const counts = 24 + (m * f) / 8;
  return {
    encoding, maxCount,
    query(tag: Uint8Array): number | null {
      if (tag.length !== 32) throw new Error("a tag is 32 bytes");
      if (n === 0) return null;
      const hash = murmur64((key64(tag) + seed) & MASK64);
      const start = Number((hash * BigInt(m - WIDTH + 1)) >> 64n);
      const coeff = murmur64((hash + GOLDEN) & MASK64) | 1n;
      let fp = 0n, count = 0n;
      for (let j = 0; j < WIDTH; j++) {
        if ((coeff >> BigInt(j)) & 1n) {
          fp ^= slot(24, f, start + j);
          count ^= slot(counts, v, start + j);
        }
      }
      if (fp !== ((hash ^ (hash >> 32n)) & ((1n << BigInt(f)) - 1n))) return null;
      return Number(count);
    },
  };
}
