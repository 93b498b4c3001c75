/**
 * The embedder a round document names: parsed and checked as the Python settings check it, an
 * embedding that declares another model refused, the entry kept in the signed bytes.
 * (A document signed by the Python servers, embedder included, is verified by verifyRound in
 * tests/fre_protocol/drivers/net/test_round_embedder.py.)
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { DEFAULT_MODEL_ID, EmbedderError, deviceEmbedding, roundEmbedder } from "../src/embedder.js";
import { withoutMember } from "../src/net.js";
import type { RoundDocument } from "../src/user.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const vectorRound: RoundDocument = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "user", "device.json"), "utf8")).round;

const DEFAULT = { name: DEFAULT_MODEL_ID, dim: 384, normalize: true };
const round = (embedder?: unknown, dim = 384): RoundDocument => ({ ...vectorRound, dim, ...(embedder === undefined ? {} : { embedder }) }) as RoundDocument;
const unit = (d: number): number[] => Array.from({ length: d }, () => 1 / Math.sqrt(d));

test("a round document names its embedder; one without the entry names none", () => {
  assert.deepEqual(roundEmbedder(round(DEFAULT)), DEFAULT);
  assert.equal(roundEmbedder(vectorRound), null);
});

test("an embedder of another dimension than the round's is refused, naming both", () => {
  assert.throws(() => roundEmbedder(round(DEFAULT, 16)),
    { name: "Error", message: `embedder '${DEFAULT_MODEL_ID}' gives 384-dimensional embeddings, but the round's dim is 16: they must be equal` });
});

test("a malformed embedder entry is refused with what was expected", () => {
  const cases: [unknown, RegExp][] = [
    [null, /must be an object/],
    [{ name: "m", dim: 384 }, /exactly the keys \[dim, name, normalize\], got \[dim, name\]/],
    [{ name: "m", dim: "384", normalize: true }, /dim must be an integer >= 1, got "384"/],
    [{ name: "m", dim: 384, normalize: 1 }, /normalize must be true or false, got 1/],
    [{ name: "", dim: 384, normalize: true }, /name must be a non-empty string/],
  ];
  for (const [entry, message] of cases) assert.throws(() => roundEmbedder(round(entry)), (e: Error) => e instanceof EmbedderError && message.test(e.message));
});

test("an embedding that declares the round's model (or the default's alias) is taken, and the line names it", () => {
  for (const name of [DEFAULT_MODEL_ID, "all-MiniLM-L6-v2", "default"]) {
    const { embedding, line } = deviceEmbedding(round(DEFAULT), { embedder: name, embedding: unit(384) });
    assert.equal(embedding.length, 384);
    assert.equal(line, `embedder ${DEFAULT_MODEL_ID} (d = 384, unit norm) (named by the round; the embedding declares it)`);
  }
  assert.match(deviceEmbedding(round(DEFAULT), unit(384)).line, /the embedding declares no model, not checked/);
});

test("an embedding that declares another model is refused before anything is sent", () => {
  assert.throws(() => deviceEmbedding(round(DEFAULT), { embedder: "sentence-transformers/all-mpnet-base-v2", embedding: unit(384) }), {
    message: `the embedding was made by 'sentence-transformers/all-mpnet-base-v2', but the round's embedder is '${DEFAULT_MODEL_ID}' (d = 384): a device embeds with the round's model only`,
  });
});

test("a round of unit-norm rows refuses an embedding that is not unit norm; the dimension is checked", () => {
  assert.throws(() => deviceEmbedding(round(DEFAULT), Array(384).fill(0.5)), /gives unit-norm rows, the embedding's norm is 9\.79796/);
  assert.ok(deviceEmbedding(round({ ...DEFAULT, normalize: false }), Array(384).fill(0.5)));
  assert.throws(() => deviceEmbedding(round(DEFAULT), unit(16)), /the round's dimension is 384, the embedding's is 16/);
  assert.throws(() => deviceEmbedding(round(DEFAULT), { embedding: unit(384), model: "x" }), /unknown keys \[model\]/);
});

test("a round that names no embedder takes the embedding as given", () => {
  assert.equal(deviceEmbedding(vectorRound, unit(16)).line, "embedder: the round names none (the embedding is given)");
  assert.match(deviceEmbedding(vectorRound, { embedder: "x", embedding: Array(16).fill(2) }).line, /declares x, not checked/);
});

test("the signed bytes keep the embedder entry: only the signatures member is taken out", () => {
  const served = `{"dim":384,"embedder":{"dim":384,"name":"${DEFAULT_MODEL_ID}","normalize":true},"signatures":{"S_tag":{}},"unit":{}}`;
  assert.equal(withoutMember(served, "signatures"), `{"dim":384,"embedder":{"dim":384,"name":"${DEFAULT_MODEL_ID}","normalize":true},"unit":{}}`);
});
