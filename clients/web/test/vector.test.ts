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
import { xsalsa20poly1305 } from "@noble/ciphers/salsa.js";
import { ristretto255_oprf, x25519 } from "@noble/curves/ed25519.js";
import { blake2b } from "@noble/hashes/blake2.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { concat, fromHex, hex } from "../src/bytes.js";
import { boxKey } from "../src/seal.js";
import { expandSeed } from "../src/sharing.js";
import { phase2Batch } from "../src/messages.js";
import { withoutMember } from "../src/net.js";
import { sampleDiscreteGaussian } from "../src/noise.js";
import { type ByteSource, RandomSource } from "../src/random.js";
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
    shareBytes: (n: number) => {
      assert.equal(n, 32);
      return fromHex(r.share_seed);
    },
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

test("the noise sampler draws the recorded noise from the recorded stream", () => {
  const c = vector.cases.find((x: any) => x.name === "released");
  const tape = fromHex(c.randomness.tape["phase2/0"]);
  let at = fromHex(c.randomness.rounding_bytes).length;
  const source: ByteSource = {
    randomBytes(n: number) {
      assert.ok(at + n <= tape.length, "the sampler drew past the stream");
      at += n;
      return tape.slice(at - n, at);
    },
  };
  const noise = sampleDiscreteGaussian(c.derived.sigma_int, c.randomness.noise.length, source);
  assert.deepEqual(noise.map(Number), c.randomness.noise);
  assert.equal(hex(source.randomBytes(32)), c.randomness.share_seed); // what follows the noise
  const small = sampleDiscreteGaussian(3.5, 2000, RandomSource.seeded(1, "noise"));
  const mean = small.reduce((a, b) => a + Number(b), 0) / small.length;
  const variance = small.reduce((a, b) => a + (Number(b) - mean) ** 2, 0) / small.length;
  assert.ok(Math.abs(mean) < 0.3 && Math.abs(variance - 3.5 ** 2) < 1.5, `mean ${mean} variance ${variance}`);
});

test("the default randomness plays a whole device against keys made here (noise sampled here)", () => {
  const c = vector.cases.find((x: any) => x.name === "released");
  const oprf = ristretto255_oprf.voprf.generateKeyPair();
  const tagBox = x25519.keygen(), synBox = x25519.keygen();
  const mine: RoundDocument = {
    ...round,
    public_keys: { voprf: hex(oprf.publicKey), S_tag_box: hex(tagBox.publicKey), S_syn_box: hex(synBox.publicKey) },
  };
  const device = new Device(mine, c.inputs.embedding, true);
  device.prepare();
  const request = device.blindRequest();
  const blinded = open(tagBox.secretKey, request).subarray(1);
  const answer = ristretto255_oprf.voprf.blindEvaluate(oprf.secretKey, oprf.publicKey, blinded);
  const tag = device.receiveEvaluation(concat(new Uint8Array([2]), answer.evaluated, answer.proof));
  const submission = open(synBox.secretKey, device.tagSubmission()!);
  assert.equal(hex(submission.subarray(1, 33)), hex(tag));
  assert.equal(device.receiveBroadcast(fromHex(c.inputs.broadcast)), null); // another round's broadcast
  device.count = 25; // as if released: the shares, with noise sampled from the OS's randomness
  const [toTag, toSyn] = device.phase2({ ddgConfig: c.derived.ddg_config, sigmaInt: c.derived.sigma_int });
  const first = open(tagBox.secretKey, toTag), second = open(synBox.secretKey, toSyn);
  const bits = c.derived.ddg_config.modulus_bits, d = c.derived.ddg_config.padded_dim;
  const seed = first.subarray(1 + 32 + 16 + 32 + 4), words = second.subarray(1 + 32 + 16 + 32 + 4);
  const mask = (1n << BigInt(bits)) - 1n, half = 1n << BigInt(bits - 1);
  const g = expandSeed(seed, d, bits);
  for (let i = 0; i < d; i++) {
    const w = BigInt(words[3 * i]) | (BigInt(words[3 * i + 1]) << 8n) | (BigInt(words[3 * i + 2]) << 16n);
    const v = (g[i] + w) & mask;
    const centered = v >= half ? Number(v - (1n << BigInt(bits))) : Number(v);
    // |rotated x / γ| ≤ 1/γ ≈ 89,000, plus 12σ of noise
    assert.ok(Math.abs(centered) < 1 / c.derived.ddg_config.gamma + 12 * c.derived.sigma_int, `coordinate ${i}: ${centered}`);
  }
});

/** crypto_box_seal_open of an envelope (type, recipient, length, epk || box). */
function open(secretKey: Uint8Array, envelope: Uint8Array): Uint8Array {
  const sealed = envelope.subarray(6);
  const epk = sealed.subarray(0, 32);
  const nonce = blake2b(concat(epk, x25519.getPublicKey(secretKey)), { dkLen: 24 });
  return xsalsa20poly1305(boxKey(epk, secretKey), nonce).decrypt(sealed.subarray(32));
}

test("the signed document's canonical bytes are the served JSON less its signatures member", () => {
  const doc = '{"a":1.0,"b":"x,}{\\"","signatures":{"S_syn":{"c":"-"},"S_tag":[1,{"d":2}]},"unit":{"cap":1}}';
  assert.equal(withoutMember(doc, "signatures"), '{"a":1.0,"b":"x,}{\\"","unit":{"cap":1}}');
  assert.equal(withoutMember('{"signatures":{"a":1},"z":2}', "signatures"), '{"z":2}');
  assert.equal(withoutMember('{"a":1,"signatures":[]}', "signatures"), '{"a":1}');
  assert.equal(withoutMember('{"a":{"signatures":1}}', "signatures"), '{"a":{"signatures":1}}');
});
