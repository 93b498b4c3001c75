/**
 * The compact-broadcast vectors (tests/vectors/compact/broadcast.json) replayed through this
 * client's reader: every ribbon (RCB1) and ribbon-classes (RCC1) case's queries answered as the
 * Python package answers them, each tag's 64-bit key the recorded one, and malformed RCC1 bodies
 * refused with the reason.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { sha256 } from "@noble/hashes/sha2.js";
import { concat, fromHex, hex, u32be, utf8 } from "../src/bytes.js";
import { Type } from "../src/messages.js";
import { decodeFloors, hear, key64, loadRibbonClasses } from "../src/ribbon.js";
import { Device, type RoundDocument } from "../src/user.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const VECTORS = join(ROOT, "tests", "vectors", "compact");
const raw = readFileSync(join(VECTORS, "broadcast.json"));
const cases: any[] = JSON.parse(raw.toString("utf8")).cases;
const READ_HERE = ["ribbon", "ribbon-classes"];

/** A CompactBroadcast message (fre_protocol/messages.py): type, u8 name length, name, u32 max_count, u32 length, body. */
function message(encoding: string, body: Uint8Array, maxCount = 0): Uint8Array {
  const name = utf8(encoding);
  return concat(new Uint8Array([Type.COMPACT_BROADCAST, name.length]), name, u32be(maxCount), u32be(body.length), body);
}

const classesCase = (n: number, f: number, c: number): any => {
  const found = cases.find((x) => x.name === `ribbon-classes broadcast, ${n} tags, ${f}-bit fingerprints, ${c}-bit classes`);
  assert.ok(found, `no ribbon-classes case of ${n} tags at ${f} and ${c} bits`);
  return found;
};

test("the vector file is the one its README lists", () => {
  const readme = readFileSync(join(VECTORS, "README.md"), "utf8");
  assert.ok(readme.includes(`- \`broadcast.json\`: \`${hex(sha256(raw))}\``));
});

test("the vectors hold the ribbon-classes cases this client is checked against", () => {
  const names = cases.filter((c) => c.encoding === "ribbon-classes").map((c) => `${c.released.length}/${c.fingerprint_bits}/${c.class_bits}`);
  assert.deepEqual(names, ["0/27/8", "12/27/8", "100/27/8", "300/27/4", "12/3/4"]);
});

for (const c of cases.filter((x) => READ_HERE.includes(x.encoding))) {
  test(`case ${c.name}: every query answered as recorded`, () => {
    const body = fromHex(c.bytes);
    assert.equal(hex(sha256(body)), c.sha256);
    const heard = hear(message(c.encoding, body, 7), c.encoding);
    assert.equal(heard.encoding, c.encoding);
    assert.equal(heard.maxCount, 7);
    for (const q of c.queries) {
      const tag = fromHex(q.tag);
      assert.equal(key64(tag).toString(16).padStart(16, "0"), q.key64, `key64 of ${q.tag}`);
      assert.equal(heard.query(tag), q.answer, `answer for ${q.tag}`);
    }
    if (c.encoding === "ribbon-classes") {
      const loaded = loadRibbonClasses(body);
      assert.deepEqual(loaded.floors, c.floors);
      assert.equal(loaded.fingerprintBits, c.fingerprint_bits);
      assert.equal(loaded.classBits, c.class_bits);
      // every released tag reads the largest floor at or below its count
      for (const [t, count] of c.released as [string, number][]) {
        const floor = Math.max(...c.floors.filter((x: number) => x <= count));
        assert.equal(loaded.query(fromHex(t)), floor, `released tag ${t} of count ${count}`);
      }
    }
  });
}

test("the rounded case reads floors below some counts; the 3-bit case answers some non-members", () => {
  const rounded = classesCase(300, 27, 4);
  const counts = new Map<string, number>(rounded.released);
  assert.ok(rounded.queries.some((q: any) => q.answer !== null && q.answer < counts.get(q.tag)!));
  const small = classesCase(12, 3, 4);
  const members = new Set(small.released.map(([t]: [string, number]) => t));
  assert.ok(small.queries.some((q: any) => !members.has(q.tag) && q.answer !== null));
});

test("hear refuses another encoding than the round's, and one it does not read", () => {
  const c = classesCase(12, 27, 8);
  assert.throws(() => hear(message("ribbon-classes", fromHex(c.bytes)), "ribbon-32"), /the broadcast is in ribbon-classes, the round's encoding is ribbon-32/);
  assert.throws(() => hear(message("fuse", fromHex(c.bytes)), "fuse"), /encoding fuse is not implemented here/);
  assert.throws(() => hear(message("ribbon", fromHex(c.bytes)), "ribbon"), /ribbon broadcast magic must be "RCB1", got "RCC1"/);
  assert.throws(() => hear(message("toString", fromHex(c.bytes)), "toString"), /not implemented here/);
});

test("a round document without a broadcast component hears ribbon-classes (the default)", () => {
  const round = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "user", "device.json"), "utf8")).round as RoundDocument;
  const components = { ...round.components };
  delete components.broadcast;
  const device = new Device({ ...round, components }, new Array(round.dim).fill(0.1), false);
  const c = classesCase(12, 27, 8);
  assert.equal(device.receiveBroadcast(message("ribbon-classes", fromHex(c.bytes))), null); // no tag of its own
  const ribbon = cases.find((x) => x.encoding === "ribbon" && x.released.length === 12);
  assert.throws(() => device.receiveBroadcast(message("ribbon-32", fromHex(ribbon.bytes))), /the round's encoding is ribbon-classes/);
});

test("malformed RCC1 bodies are refused with the reason", () => {
  const good = fromHex(classesCase(12, 27, 8).bytes);
  const empty = fromHex(classesCase(0, 27, 8).bytes);
  const edit = (data: Uint8Array, at: number, ...bytes: number[]): Uint8Array => {
    const out = data.slice();
    out.set(bytes, at);
    return out;
  };
  const refusals: [Uint8Array, RegExp][] = [
    [good.subarray(0, 23), /must be at least 24 bytes \(its header\), got 23/],
    [edit(good, 0, 0x52, 0x43, 0x42, 0x31), /magic must be "RCC1", got "RCB1"/],
    [edit(good, 4, 0), /fingerprint_bits must be an integer in \[1, 32\], got 0/],
    [edit(good, 4, 33), /fingerprint_bits must be an integer in \[1, 32\], got 33/],
    [edit(good, 5, 0), /class_bits must be an integer in \[1, 16\], got 0/],
    [edit(good, 5, 17), /class_bits must be an integer in \[1, 16\], got 17/],
    [edit(good, 6, 32), /width and reserved must be 64 and 0, got 32 and 0/],
    [edit(good, 7, 1), /width and reserved must be 64 and 0, got 64 and 1/],
    [edit(good, 20, 63, 0, 0, 0), /of 12 tags must have 0 slots if empty, else at least 64, got 63/],
    [edit(empty, 20, 64, 0, 0, 0), /of 0 tags must have 0 slots if empty, else at least 64, got 64/],
    [edit(empty, 16, 1, 0, 0, 0), /of 1 tags must have 0 slots if empty, else at least 64, got 0/],
    [good.subarray(0, 25), /count-class table must start with its u16 length/],
    [edit(good, 24, 1, 1), /count-class table must hold at most 256 floors, got 257/],
    [edit(good, 24, 0, 0), /of 12 tags must have floors if and only if it has tags, got 0/],
    [concat(good, new Uint8Array([0])), /must be 322 bytes \(header, floors and 64 slots of 35 bits\), got 323/],
    [good.subarray(0, good.length - 1), /must be 322 bytes \(header, floors and 64 slots of 35 bits\), got 321/],
    [edit(good, 26, 0), /floors must increase from 1 below 2\^32, got 0 at 0/],
    [edit(good, 27, 0), /floors must increase from 1 below 2\^32, got 1 at 1/],
    [concat(empty.subarray(0, 24), new Uint8Array([1, 0, 0x80])), /floor 0 is truncated or longer than 5 bytes/],
    [concat(empty.subarray(0, 24), new Uint8Array([1, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01])), /floor 0 is truncated or longer than 5 bytes/],
    [concat(empty.subarray(0, 24), new Uint8Array([1, 0, 0x80, 0x80, 0x80, 0x80, 0x10])), /below 2\^32, got 4294967296 at 0/],
  ];
  // One reading per byte string: a floor in a longer varint than it needs, set padding bits.
  refusals.push([concat(empty.subarray(0, 24), new Uint8Array([1, 0, 0x81, 0x00])), /floor 0 is not in its shortest encoding/]);
  const padded = fromHex(classesCase(100, 27, 8).bytes); // 135 slots of 35 bits: 3 bits pad the last byte
  refusals.push([edit(padded, padded.length - 1, padded[padded.length - 1] | 0x80), /padding bits after the last slot must be 0/]);
  for (const [body, reason] of refusals) assert.throws(() => loadRibbonClasses(body), reason);
});

test("the floors table: LEB128 differences, the largest floor below 2^32", () => {
  const table = new Uint8Array([3, 0, 0x01, 0x80, 0x01, 0xfe, 0xfe, 0xff, 0xff, 0x0f, 0xaa]) // Python's encode_floors([1, 129, 2**32 - 1]);
  assert.deepEqual(decodeFloors(table, 0, 4), { floors: [1, 129, 2 ** 32 - 1], end: 10 });
  assert.throws(() => decodeFloors(table, 0, 2), /at most 2 floors, got 3/);
});

test("a query takes under 0.1 ms (27 + 8 bits, 300 tags)", () => {
  const c = classesCase(300, 27, 4);
  const loaded = loadRibbonClasses(fromHex(c.bytes));
  const tags = c.released.map(([t]: [string, number]) => fromHex(t));
  for (const t of tags) loaded.query(t); // warm up
  const rounds = 10, start = performance.now();
  for (let r = 0; r < rounds; r++) for (const t of tags) loaded.query(t);
  const perQuery = (performance.now() - start) / (rounds * tags.length);
  console.log(`ribbon-classes query: ${(perQuery * 1000).toFixed(1)} µs`);
  assert.ok(perQuery < 0.1, `${perQuery} ms per query`);
});
