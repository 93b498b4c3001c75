/**
 * The user-side vectors (tests/vectors/user/device.json) replayed through this client: with the
 * recorded randomness injected, every plaintext and envelope a device sends must equal the
 * Python user role's, byte for byte, and every intermediate value on the way.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { sha256 } from "@noble/hashes/sha2.js";
import { fromHex, hex } from "../src/bytes.js";
import { phase2Batch } from "../src/messages.js";
import { RandomSource } from "../src/random.js";
import { type SecretRandomness, Device, type RoundDocument, type SealKind } from "../src/user.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const VECTORS = join(ROOT, "tests", "vectors", "user");
const raw = readFileSync(join(VECTORS, "device.json"));
const vector = JSON.parse(raw.toString("utf8"));
const round: RoundDocument = vector.round;

function recorded(r: any): SecretRandomness {
  const covers = [...(r.cover_tokens ?? [])];
  return {
    blindBytes: () => fromHex(r.blind_scalar_bytes),
    sealSeed: (kind: SealKind) => fromHex(r.seal_seeds[kind]),
    token: () => fromHex(r.token),
    roundingBytes: (n: number) => {
      const bytes = fromHex(r.rounding_bytes);
      assert.equal(bytes.length, 8 * n);
      return bytes;
    },
    noise: (_sigma: number, n: number) => {
      assert.equal(r.noise.length, n);
      return r.noise.map(BigInt);
    },
    shareSeed: () => fromHex(r.share_seed),
    contributionId: () => fromHex(r.contribution_id),
    coverToken: () => fromHex(covers.shift()),
  };
}

test("the vector file is the one its README lists", () => {
  const readme = readFileSync(join(VECTORS, "README.md"), "utf8");
  assert.ok(readme.includes(`- \`device.json\`: \`${hex(sha256(raw))}\``));
});

for (const c of vector.cases) {
  test(`case ${c.name}: every message byte for byte`, () => {
    const device = new Device(round, c.inputs.embedding, c.randomness.coin, recorded(c.randomness));
    assert.equal(hex(device.bucket), c.derived.bucket_encoding, "bucket (public grid)");
    device.prepare();
    device.blindRequest();
    assert.equal(hex(device.sent[0].plaintext.subarray(1)), c.derived.blinded_element, "blinded element");
    assert.equal(hex(device.receiveEvaluation(fromHex(c.inputs.evaluation))), c.derived.tag, "tag");
    device.tagSubmission();
    assert.equal(device.receiveBroadcast(fromHex(c.inputs.broadcast)), c.derived.count, "count from the broadcast");
    const [toTag, toSyn] = device.phase2({ ddgConfig: c.derived.ddg_config, sigmaInt: c.derived.sigma_int ?? 0 });
    assert.deepEqual(device.sent.map((s) => [s.step, s.recipient]), c.messages.map((m: any) => [m.step, m.recipient]));
    device.sent.forEach((s, i) => {
      assert.equal(hex(s.plaintext), c.plaintexts[i], `plaintext ${i} (${s.step})`);
      assert.equal(hex(s.envelope), c.messages[i].envelope, `envelope ${i} (${s.step})`);
    });
    assert.equal(hex(phase2Batch([toTag, toSyn])), c.phase2_body);
  });
}

test("a tampered proof is refused before anything else is sent", () => {
  const c = vector.cases[0];
  const device = new Device(round, c.inputs.embedding, c.randomness.coin, recorded(c.randomness));
  device.prepare();
  device.blindRequest();
  const evaluation = fromHex(c.inputs.evaluation);
  evaluation[evaluation.length - 1] ^= 1;
  assert.throws(() => device.receiveEvaluation(evaluation));
  assert.equal(device.tag, null);
});

test("the public-randomness stream is Python's RandomSource (the device streams' tape)", () => {
  for (const c of vector.cases) {
    const source = RandomSource.seeded(36, `user-vector/device/${c.name}`);
    for (const [label, bytes] of Object.entries(c.randomness.tape) as [string, string][]) {
      assert.equal(hex(source.child(label).randomBytes(bytes.length / 2)), bytes, `${c.name} ${label}`);
    }
  }
});
