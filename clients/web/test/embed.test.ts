/**
 * The device's embedding (src/embed.ts, onnxruntime-web's wasm backend) against the project's
 * embedder: every text of tests/vectors/embedding/minilm.json within the recorded tolerance
 * (cosine, largest |Δ| of a coordinate) and in the recorded canonical bucket, from the assets
 * folder `fre-e2t web-assets` writes (clients/web/dist/assets, or $FRE_E2T_WEB_ASSETS). Without
 * that folder these tests are skipped, and say so.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { fromHex, hex } from "../src/bytes.js";
import { type AssetSource, type DeviceEmbedder, EmbedAssetError, assetsAtUrl, assetsInFolder, loadEmbedder } from "../src/embed.js";
import { bucketEncoding } from "../src/grid.js";

const HERE = dirname(fileURLToPath(import.meta.url)); // clients/web/dist/test
const ROOT = join(HERE, "..", "..", "..", "..");
const ASSETS = resolve(process.env.FRE_E2T_WEB_ASSETS ?? join(HERE, "..", "assets"));
const HAVE_ASSETS = existsSync(join(ASSETS, "manifest.json"));
const SKIP = HAVE_ASSETS ? false : `no assets folder at ${ASSETS}; build it with \`fre-e2t web-assets\` (make test does)`;
if (!HAVE_ASSETS) console.log(`embed.test: SKIPPED: ${SKIP}`);

interface Case { text: string; tokens: number; embedding: number[]; bucket: string | null }
interface Vectors {
  model: string; dim: number; normalize: boolean; max_seq_length: number;
  tolerance: { min_cosine: number; max_abs_diff: number };
  grid: { public_seed: string; k: number; radius: number; edge_multiplier: number };
  cases: Case[];
}
const vectors: Vectors = JSON.parse(readFileSync(join(ROOT, "tests", "vectors", "embedding", "minilm.json"), "utf8"));

const dot = (a: number[], b: number[]): number => a.reduce((s, v, i) => s + v * b[i], 0);
const cosine = (a: number[], b: number[]): number => dot(a, b) / Math.sqrt(dot(a, a) * dot(b, b));

let loaded: Promise<DeviceEmbedder> | undefined;
const embedder = (): Promise<DeviceEmbedder> => (loaded ??= assetsInFolder(ASSETS).then(loadEmbedder));

test("the device embedder loads from the assets folder and names the round's model", { skip: SKIP }, async (t) => {
  const start = performance.now();
  const e = await embedder();
  t.diagnostic(`load: ${(performance.now() - start).toFixed(0)} ms (manifest, SHA-256 of the model files, the model compiled in wasm)`);
  assert.deepEqual({ name: e.name, dim: e.dim, normalize: e.normalize }, { name: vectors.model, dim: vectors.dim, normalize: vectors.normalize });
});

test("every vector text embeds within the tolerance and, where recorded, in the same bucket", { skip: SKIP }, async (t) => {
  const e = await embedder();
  const seed = fromHex(vectors.grid.public_seed);
  const { min_cosine: minCosine, max_abs_diff: maxAbsDiff } = vectors.tolerance;
  let worstCosine = 1, worstDiff = 0, buckets = 0;
  const times: number[] = [];
  for (const c of vectors.cases) {
    const start = performance.now();
    const got = await e.embed(c.text);
    times.push(performance.now() - start);
    const cos = cosine(got, c.embedding);
    const diff = Math.max(...got.map((v, i) => Math.abs(v - c.embedding[i])));
    worstCosine = Math.min(worstCosine, cos);
    worstDiff = Math.max(worstDiff, diff);
    const where = `${JSON.stringify(c.text.slice(0, 40))} (${c.tokens} tokens)`;
    assert.equal(got.length, vectors.dim, where);
    assert.ok(cos >= minCosine, `${where}: cosine ${cos} < ${minCosine}`);
    assert.ok(diff <= maxAbsDiff, `${where}: max |Δ| ${diff} > ${maxAbsDiff}`);
    if (c.bucket !== null) {
      assert.equal(hex(bucketEncoding(got, seed, vectors.grid)), c.bucket, `${where}: another bucket`);
      buckets++;
    }
  }
  const sorted = [...times].sort((a, b) => a - b);
  t.diagnostic(`${vectors.cases.length} texts: min cosine ${worstCosine}, max |Δ| ${worstDiff.toExponential(2)}; ${buckets} recorded buckets equal`);
  t.diagnostic(`embed one text: median ${sorted[sorted.length >> 1].toFixed(1)} ms, max ${sorted[sorted.length - 1].toFixed(1)} ms`);
});

test("a model file other than the manifest's is refused before it is run", { skip: SKIP }, async () => {
  const real = await assetsInFolder(ASSETS);
  const manifest = JSON.parse(new TextDecoder().decode(await real.read("manifest.json")));
  manifest.files["model/model.onnx"].sha256 = "00".repeat(32);
  const tampered: AssetSource = {
    runtimeUrl: real.runtimeUrl,
    read: async (path) => (path === "manifest.json" ? new TextEncoder().encode(JSON.stringify(manifest)) : real.read(path)),
  };
  await assert.rejects(loadEmbedder(tampered), (err: Error) => err instanceof EmbedAssetError && /model\/model\.onnx is not the one the manifest lists/.test(err.message));
});

test("a missing assets folder names the command that builds it", async () => {
  const missing = await assetsInFolder(join(HERE, "no-such-assets"));
  await assert.rejects(loadEmbedder(missing), /fre-e2t web-assets --out/);
});

test("a browser's asset source fetches every file under its base URL, same origin, and the runtime from runtime/", async () => {
  const asked: string[] = [];
  const fetchFile = (async (url: URL, init?: RequestInit) => {
    asked.push(`${url.href} ${init?.credentials}`);
    return url.pathname.endsWith("missing.json") ? new Response("", { status: 404 }) : new Response(new Uint8Array([1, 2, 3]));
  }) as typeof fetch;
  const assets = assetsAtUrl("https://example.test/web/assets", fetchFile); // no trailing slash: one is added
  assert.equal(assets.runtimeUrl, "https://example.test/web/assets/runtime/");
  assert.deepEqual(await assets.read("model/model.onnx"), new Uint8Array([1, 2, 3]));
  await assert.rejects(assets.read("missing.json"), (err: Error) => err instanceof EmbedAssetError && /web\/assets\/missing\.json could not be fetched: HTTP 404/.test(err.message));
  assert.deepEqual(asked, ["https://example.test/web/assets/model/model.onnx same-origin", "https://example.test/web/assets/missing.json same-origin"]);
});
