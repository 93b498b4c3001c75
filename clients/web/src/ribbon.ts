/**
 * The compact broadcast as a device queries it: the CompactBroadcast message's body, queried for
 * one tag, in one of two formats.
 *
 * - ``ribbon`` and ``ribbon-32`` (docs/compact-broadcast.md, "ribbon"): RCB1, a fingerprint
 *   array and a count array; a released tag reads its exact count.
 * - ``ribbon-classes`` (primitives/compact/ribbon_classes.py and count_classes.py): RCC1, one
 *   array of bit-packed slots, each a fingerprint and a count class, and the classes' floors; a
 *   released tag reads its class's floor (its count, or rounded down to a public floor).
 *
 * Both share the ribbon's hashing: from the tag's 64-bit key k, hash = murmur64(k + seed),
 * start = (hash · (m − 63)) >> 64, coefficient = murmur64(hash + golden) | 1; the query XORs
 * the slots start + j for each bit j set in the coefficient.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { concat, hex, utf8 } from "./bytes.js";
import { decodeCompactBroadcast } from "./messages.js";

const KEY_DOMAIN = utf8("fre-e2t/compact/key/v1");
const MASK64 = (1n << 64n) - 1n;
const MASK32 = 0xffffffffn;
const GOLDEN = 0x9e3779b97f4a7c15n;
const WIDTH = 64;
const HEADER_BYTES = 24;
const TAG_BYTES = 32;
/** The most bits a ribbon-classes fingerprint and count class may have. */
const MAX_FINGERPRINT_BITS = 32;
const MAX_CLASS_BITS = 16;

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

/** A loaded broadcast body: the count a tag reads, or null when the tag was not released. */
export interface LoadedBroadcast {
  query(tag: Uint8Array): number | null;
}

export interface HeardBroadcast extends LoadedBroadcast {
  encoding: string;
  maxCount: number;
}

/** The encodings this client reads, by registry name, and their loaders. */
const LOADERS: Record<string, (body: Uint8Array) => LoadedBroadcast> = {
  ribbon: loadRibbon,
  "ribbon-32": loadRibbon,
  "ribbon-classes": loadRibbonClasses,
};

/** Load a CompactBroadcast in the round's encoding (``ribbon``, ``ribbon-32`` or ``ribbon-classes``). */
export function hear(message: Uint8Array, expected: string): HeardBroadcast {
  const { encoding, maxCount, body } = decodeCompactBroadcast(message);
  if (encoding !== expected) throw new Error(`the broadcast is in ${encoding}, the round's encoding is ${expected}`);
  const load = Object.hasOwn(LOADERS, encoding) ? LOADERS[encoding] : undefined;
  if (load === undefined) throw new Error(`encoding ${encoding} is not implemented here (this client reads ${Object.keys(LOADERS).join(", ")})`);
  const loaded = load(body);
  return { encoding, maxCount, query: (tag) => loaded.query(tag) };
}

function checkTag(tag: Uint8Array): void {
  if (tag.length !== TAG_BYTES) throw new Error(`tag must be ${TAG_BYTES} bytes, got ${tag.length}`);
}

/** The ribbon row of ``tag`` in a ribbon of ``m`` slots: its hash, start, and coefficient as two 32-bit halves. */
function row(tag: Uint8Array, seed: bigint, m: number): { hash: bigint; start: number; low: number; high: number } {
  const hash = murmur64((key64(tag) + seed) & MASK64);
  const start = Number((hash * BigInt(m - WIDTH + 1)) >> 64n);
  const coeff = murmur64((hash + GOLDEN) & MASK64) | 1n;
  return { hash, start, low: Number(coeff & MASK32), high: Number(coeff >> 32n) };
}

/** The fingerprint a released key's slots XOR to: the low ``bits`` of hash ^ (hash >> 32). */
const fingerprintOf = (hash: bigint, bits: number): number => Number((hash ^ (hash >> 32n)) & ((1n << BigInt(bits)) - 1n));

function magicOf(body: Uint8Array): string {
  const magic = body.subarray(0, 4);
  return magic.every((b) => b >= 0x20 && b < 0x7f) ? JSON.stringify(new TextDecoder().decode(magic)) : `0x${hex(magic)}`;
}

// --- RCB1 -------------------------------------------------------------------------------------

/** An RCB1 body (``ribbon``, ``ribbon-32``): fingerprints, then counts, each 8, 16 or 32 bits. */
export function loadRibbon(body: Uint8Array): LoadedBroadcast {
  const what = "ribbon broadcast";
  if (body.length < HEADER_BYTES) throw new Error(`${what} must be at least ${HEADER_BYTES} bytes (its header), got ${body.length}`);
  if (magicOf(body) !== '"RCB1"') throw new Error(`${what} magic must be "RCB1", got ${magicOf(body)}`);
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const f = body[4], v = body[5];
  for (const [name, bits] of [["fingerprint bits", f], ["count bits", v]] as const) {
    if (![8, 16, 32].includes(bits)) throw new Error(`${what} ${name} must be one of 8, 16, 32, got ${bits}`);
  }
  if (body[6] !== WIDTH) throw new Error(`${what} width must be ${WIDTH}, got ${body[6]}`);
  if (body[7] !== 0) throw new Error(`${what} reserved field must be 0, got ${body[7]}`);
  const seed = view.getBigUint64(8, true), n = view.getUint32(16, true), m = view.getUint32(20, true);
  if (n === 0 && m !== 0) throw new Error(`${what} of 0 tags must have 0 slots, got ${m}`);
  if (n > 0 && m < WIDTH) throw new Error(`${what} slots must be at least ${WIDTH}, got ${m}`);
  const expected = HEADER_BYTES + (m * (f + v)) / 8;
  if (body.length !== expected) throw new Error(`${what} must be ${expected} bytes (header and ${m} slots of ${f} + ${v} bits), got ${body.length}`);
  const slot = (offset: number, bits: number, i: number): number =>
    bits === 8 ? view.getUint8(offset + i) : bits === 16 ? view.getUint16(offset + 2 * i, true) : view.getUint32(offset + 4 * i, true);
  const counts = HEADER_BYTES + (m * f) / 8;
  return {
    query(tag: Uint8Array): number | null {
      checkTag(tag);
      if (n === 0) return null;
      const { hash, start, low, high } = row(tag, seed, m);
      let fp = 0, count = 0;
      for (let j = 0; j < WIDTH; j++) {
        if (((j < 32 ? low >>> j : high >>> (j - 32)) & 1) === 1) {
          fp ^= slot(HEADER_BYTES, f, start + j);
          count ^= slot(counts, v, start + j);
        }
      }
      if (fp >>> 0 !== fingerprintOf(hash, f)) return null;
      return count >>> 0;
    },
  };
}

// --- RCC1 -------------------------------------------------------------------------------------

/**
 * The count-class floors table at ``offset``: a u16 count (at most ``maxFloors``), then the
 * first floor and the positive differences, unsigned LEB128; the floors increase from 1 and stay
 * below 2^32. Returns the floors and the offset after the table.
 */
export function decodeFloors(data: Uint8Array, offset: number, maxFloors: number): { floors: number[]; end: number } {
  if (data.length < offset + 2) throw new Error("count-class table must start with its u16 length, got too few bytes");
  const k = data[offset] | (data[offset + 1] << 8);
  if (k > maxFloors) throw new Error(`count-class table must hold at most ${maxFloors} floors, got ${k}`);
  const floors: number[] = [];
  let pos = offset + 2, previous = 0;
  for (let i = 0; i < k; i++) {
    let value = 0, shift = 0;
    for (;;) {
      // One encoding per table: at most 5 bytes, and no trailing zero group.
      if (pos >= data.length || shift > 28) throw new Error(`count-class table floor ${i} is truncated or longer than 5 bytes`);
      const byte = data[pos++];
      if (byte === 0 && shift > 0) throw new Error(`count-class table floor ${i} is not in its shortest encoding`);
      value += (byte & 0x7f) * 2 ** shift; // at most 2^42: exact in a double
      shift += 7;
      if ((byte & 0x80) === 0) break;
    }
    if (value === 0 || previous + value >= 2 ** 32) {
      throw new Error(`count-class floors must increase from 1 below 2^32, got ${previous + value} at ${i}`);
    }
    previous += value;
    floors.push(previous);
  }
  return { floors, end: pos };
}

/** Bits [p, p + w) of the little-endian bitstream at ``base`` (w ≤ 32; bit j is bit j mod 8 of byte j div 8). */
function bitsAt(data: Uint8Array, base: number, p: number, w: number): number {
  const at = base + Math.floor(p / 8), shift = p % 8;
  let value = 0; // at most 5 bytes, 40 bits: exact in a double
  for (let k = Math.ceil((shift + w) / 8) - 1; k >= 0; k--) value = value * 256 + data[at + k];
  return Math.floor(value / 2 ** shift) % 2 ** w;
}

/** An RCC1 body (``ribbon-classes``): header, floors table, m packed (fingerprint, class) slots. */
export function loadRibbonClasses(body: Uint8Array): LoadedBroadcast & { floors: readonly number[]; fingerprintBits: number; classBits: number } {
  const what = "ribbon-classes broadcast";
  if (body.length < HEADER_BYTES) throw new Error(`${what} must be at least ${HEADER_BYTES} bytes (its header), got ${body.length}`);
  if (magicOf(body) !== '"RCC1"') throw new Error(`${what} magic must be "RCC1", got ${magicOf(body)}`);
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const f = body[4], c = body[5];
  if (f < 1 || f > MAX_FINGERPRINT_BITS) throw new Error(`${what}: fingerprint_bits must be an integer in [1, ${MAX_FINGERPRINT_BITS}], got ${f}`);
  if (c < 1 || c > MAX_CLASS_BITS) throw new Error(`${what}: class_bits must be an integer in [1, ${MAX_CLASS_BITS}], got ${c}`);
  if (body[6] !== WIDTH || body[7] !== 0) {
    throw new Error(`${what} width and reserved must be ${WIDTH} and 0, got ${body[6]} and ${body[7]}`);
  }
  const seed = view.getBigUint64(8, true), n = view.getUint32(16, true), m = view.getUint32(20, true);
  if ((n === 0) !== (m === 0) || (n > 0 && m < WIDTH)) {
    throw new Error(`${what} of ${n} tags must have 0 slots if empty, else at least ${WIDTH}, got ${m}`);
  }
  const { floors, end } = decodeFloors(body, HEADER_BYTES, 2 ** c);
  if ((n > 0) !== floors.length > 0) {
    throw new Error(`${what} of ${n} tags must have floors if and only if it has tags, got ${floors.length}`);
  }
  const bits = f + c;
  const expected = end + Math.ceil((m * bits) / 8); // m·bits < 2^38: exact
  if (body.length !== expected) {
    throw new Error(`${what} must be ${expected} bytes (header, floors and ${m} slots of ${bits} bits), got ${body.length}`);
  }
  const used = (m * bits) % 8;
  if (used !== 0 && body[body.length - 1] >> used !== 0) {
    throw new Error(`${what} padding bits after the last slot must be 0`);
  }
  // XOR acts on each field alone, so the fingerprints and classes are unpacked apart.
  const fingerprints = new Uint32Array(m), classes = new Uint16Array(m);
  for (let i = 0; i < m; i++) {
    fingerprints[i] = bitsAt(body, end, i * bits, f);
    classes[i] = bitsAt(body, end, i * bits + f, c);
  }
  return {
    floors, fingerprintBits: f, classBits: c,
    query(tag: Uint8Array): number | null {
      checkTag(tag);
      if (n === 0) return null;
      const { hash, start, low, high } = row(tag, seed, m);
      let fp = 0, index = 0;
      for (let j = 0; j < WIDTH; j++) {
        if (((j < 32 ? low >>> j : high >>> (j - 32)) & 1) === 1) {
          fp ^= fingerprints[start + j];
          index ^= classes[start + j];
        }
      }
      if (fp >>> 0 !== fingerprintOf(hash, f)) return null;
      return index < floors.length ? floors[index] : null; // a class past the table: an unreleased tag's garbage
    },
  };
}
