/**
 * What one device's steps cost in this client (node, one thread): `npm run bench [-- DIM]`.
 * A round like the user-side vector's (ε = 16, k = 20) at the given dimension (default 384,
 * MiniLM's), against keys made here; the noise at the vector's σ_int, the broadcast the vector's.
 * Medians of 20 runs of each step, in milliseconds.
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ristretto255_oprf, x25519 } from "@noble/curves/ed25519.js";
import { concat, fromHex, hex } from "../src/bytes.js";
import { Device, type RoundDocument } from "../src/user.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const vector = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "user", "device.json"), "utf8"));
const dim = Number(process.argv[2] ?? 384);
const padded = 2 ** Math.ceil(Math.log2(dim));
const oprf = ristretto255_oprf.voprf.generateKeyPair();
const tagBox = x25519.keygen(), synBox = x25519.keygen();
const round: RoundDocument = {
  ...vector.round, dim,
  public_keys: { voprf: hex(oprf.publicKey), S_tag_box: hex(tagBox.publicKey), S_syn_box: hex(synBox.publicKey) },
};
const c = vector.cases[0];
const config = { ...c.derived.ddg_config, dim, padded_dim: padded };
const times: Record<string, number[]> = {};
const timed = <T>(step: string, fn: () => T): T => {
  const t0 = performance.now();
  const out = fn();
  (times[step] ??= []).push(performance.now() - t0);
  return out;
};
for (let run = 0; run < 21; run++) {
  const x = Array.from({ length: dim }, () => Math.random() - 0.5);
  const device = timed("bucket (public grid, exact sums)", () => new Device(round, x, true));
  timed("offline: blind scalar + 4 ephemeral keys", () => device.prepare());
  const request = timed("blind + seal request", () => device.blindRequest());
  void request;
  // S_tag's answer to the real blinded element (the envelope's plaintext, kept by the device).
  const blinded = device.sent[0].plaintext.subarray(1);
  const evaluation = ristretto255_oprf.voprf.blindEvaluate(oprf.secretKey, oprf.publicKey, blinded);
  timed("verify proof + finalize", () => device.receiveEvaluation(concat(new Uint8Array([2]), evaluation.evaluated, evaluation.proof)));
  timed("seal tag submission", () => device.tagSubmission());
  timed("load broadcast + query", () => device.receiveBroadcast(fromHex(c.inputs.broadcast)));
  device.count = 25;
  timed("DDG encode (noise) + share + seal both", () => device.phase2({ ddgConfig: config, sigmaInt: c.derived.sigma_int }));
}
const median = (v: number[]) => [...v.slice(1)].sort((a, b) => a - b)[Math.floor((v.length - 1) / 2)];
console.log(`| step (d = ${dim}, d' = ${padded}) | ms |`);
console.log("|---|---|");
let total = 0;
for (const [step, v] of Object.entries(times)) {
  total += median(v);
  console.log(`| ${step} | ${median(v).toFixed(2)} |`);
}
console.log(`| total | ${total.toFixed(2)} |`);
