/**
 * A person's text embedded on the device, as the project's default embedder embeds it
 * (fre_protocol/text/embedder.py: sentence-transformers all-MiniLM-L6-v2, 384-d, mean pooling over
 * the attention mask, unit norm). The model runs in onnxruntime-web's WebAssembly backend (one
 * thread), the tokenizer in @huggingface/tokenizers (pure JS); both read only the assets folder
 * that `fre-e2t web-assets` writes:
 *
 *   manifest.json                      model id, dim, normalize, max_seq_length; each file's SHA-256 and size
 *   model/model.onnx                   the model (token embeddings: last_hidden_state)
 *   model/tokenizer.json, model/tokenizer_config.json
 *   runtime/ort-wasm-simd-threaded.{mjs,wasm}   onnxruntime-web's runtime
 *
 * Nothing is fetched from any other place: the runtime's location is set to the assets folder, and
 * the model and tokenizer files are checked against the manifest's SHA-256 before use.
 */
import * as ort from "onnxruntime-web/wasm";
import { Tokenizer } from "@huggingface/tokenizers";

export interface DeviceEmbedder {
  /** The model's id as a round document names it (e.g. sentence-transformers/all-MiniLM-L6-v2). */
  name: string;
  dim: number;
  normalize: boolean;
  embed(text: string): Promise<number[]>;
}

/**
 * Where the assets folder is: `read` gives a file's bytes by its path inside the folder
 * ("manifest.json", "model/model.onnx"), `runtimeUrl` is the URL of its `runtime/` folder, ending
 * in "/", from which onnxruntime-web imports its .mjs and loads its .wasm. A browser uses
 * {@link assetsAtUrl}, node {@link assetsInFolder}.
 */
export interface AssetSource {
  read(path: string): Promise<Uint8Array>;
  runtimeUrl: string;
}

export class EmbedAssetError extends Error {}

/** The folder served at `base` (e.g. "/web/assets/", resolved against the page's address). */
export function assetsAtUrl(base: string | URL, fetchFile: typeof fetch = fetch): AssetSource {
  const root = new URL(String(base).endsWith("/") ? String(base) : `${base}/`, globalThis.location?.href);
  return {
    runtimeUrl: new URL("runtime/", root).href,
    async read(path: string): Promise<Uint8Array> {
      const url = new URL(path, root);
      const response = await fetchFile(url, { credentials: "same-origin" });
      if (!response.ok) throw new EmbedAssetError(`asset ${url.href} could not be fetched: HTTP ${response.status}`);
      return new Uint8Array(await response.arrayBuffer());
    },
  };
}

/** A node module by a name held in a variable: a browser bundler leaves the import alone. */
const nodeImport = <T>(name: string): Promise<T> => import(name) as Promise<T>;

/** The assets folder at `dir` on this machine (node). */
export async function assetsInFolder(dir: string): Promise<AssetSource> {
  const { readFile } = await nodeImport<typeof import("node:fs/promises")>("node:fs/promises");
  const { join, resolve } = await nodeImport<typeof import("node:path")>("node:path");
  const { pathToFileURL } = await nodeImport<typeof import("node:url")>("node:url");
  const root = resolve(dir);
  return {
    runtimeUrl: pathToFileURL(join(root, "runtime")).href + "/",
    async read(path: string): Promise<Uint8Array> {
      try {
        return new Uint8Array(await readFile(join(root, ...path.split("/"))));
      } catch (err) {
        throw new EmbedAssetError(`asset ${path} could not be read from ${root}: ${(err as Error).message}; build the folder with \`fre-e2t web-assets --out ${dir}\``);
      }
    },
  };
}

interface FileEntry { sha256: string; size: number }
interface Manifest {
  format: number;
  model: { id: string; dim: number; normalize: boolean; max_seq_length: number; pooling: string };
  files: Record<string, FileEntry>;
}

const MANIFEST_FORMAT = 1;
const MODEL_FILES = ["model/model.onnx", "model/tokenizer.json", "model/tokenizer_config.json"];

const hex = (bytes: ArrayBuffer): string => Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");

async function readManifest(assets: AssetSource): Promise<Manifest> {
  const manifest = JSON.parse(new TextDecoder().decode(await assets.read("manifest.json"))) as Manifest;
  if (manifest.format !== MANIFEST_FORMAT) {
    throw new EmbedAssetError(`the assets' manifest.json has format ${JSON.stringify(manifest.format)}, this client reads format ${MANIFEST_FORMAT}`);
  }
  if (manifest.model.pooling !== "mean") throw new EmbedAssetError(`the assets' model pools by ${JSON.stringify(manifest.model.pooling)}, this client pools by mean only`);
  return manifest;
}

/** A file of the manifest, its size and SHA-256 checked: a changed model must not embed quietly. */
async function readChecked(assets: AssetSource, manifest: Manifest, path: string): Promise<Uint8Array> {
  const entry = manifest.files[path];
  if (entry === undefined) throw new EmbedAssetError(`the assets' manifest.json does not list ${path}`);
  const bytes = await assets.read(path);
  const digest = hex(await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>));
  if (bytes.length !== entry.size || digest !== entry.sha256) {
    throw new EmbedAssetError(`asset ${path} is not the one the manifest lists (sha256 ${digest}, ${bytes.length} bytes; expected ${entry.sha256}, ${entry.size} bytes)`);
  }
  return bytes;
}

/** Token ids as sentence-transformers gives them: [CLS] text [SEP], cut to max_seq_length tokens
 * in all (the text's tokens cut at the end, [SEP] kept). */
export function tokenIds(tokenizer: Tokenizer, text: string, maxSeqLength: number): number[] {
  const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
  const cls = tokenizer.token_to_id("[CLS]"), sep = tokenizer.token_to_id("[SEP]");
  if (cls === undefined || sep === undefined) throw new EmbedAssetError("the tokenizer has no [CLS] or [SEP] token");
  return [cls, ...ids.slice(0, maxSeqLength - 2), sep];
}

/** Mean of the token vectors (all attended: one unpadded text), then L2 normalisation if asked. */
function pool(hidden: Float32Array, tokens: number, dim: number, normalize: boolean): number[] {
  const out = new Array<number>(dim).fill(0);
  for (let t = 0; t < tokens; t++) for (let j = 0; j < dim; j++) out[j] += hidden[t * dim + j];
  for (let j = 0; j < dim; j++) out[j] /= tokens;
  if (!normalize) return out;
  const norm = Math.max(Math.sqrt(out.reduce((s, v) => s + v * v, 0)), 1e-12); // torch's F.normalize eps
  return out.map((v) => v / norm);
}

/** Load the model and tokenizer from `assets` and return the device's embedder. */
export async function loadEmbedder(assets: AssetSource): Promise<DeviceEmbedder> {
  const manifest = await readManifest(assets);
  const [model, tokenizerJson, tokenizerConfig] = await Promise.all(MODEL_FILES.map((p) => readChecked(assets, manifest, p)));
  const decode = (b: Uint8Array): object => JSON.parse(new TextDecoder().decode(b)) as object;
  const tokenizer = new Tokenizer(decode(tokenizerJson), decode(tokenizerConfig));
  ort.env.wasm.wasmPaths = assets.runtimeUrl;
  ort.env.wasm.numThreads = 1; // no worker threads: no cross-origin isolation needed
  ort.env.wasm.proxy = false;
  const runner = await ort.InferenceSession.create(model, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  const { id, dim, normalize, max_seq_length: maxSeqLength } = manifest.model;
  const tensor = (values: number[]): ort.Tensor => new ort.Tensor("int64", BigInt64Array.from(values, BigInt), [1, values.length]);
  return {
    name: id,
    dim,
    normalize,
    async embed(text: string): Promise<number[]> {
      if (typeof text !== "string") throw new TypeError(`text must be a string, got ${typeof text}`);
      const ids = tokenIds(tokenizer, text, maxSeqLength);
      const feeds = { input_ids: tensor(ids), attention_mask: tensor(ids.map(() => 1)), token_type_ids: tensor(ids.map(() => 0)) };
      const result = await runner.run(feeds);
      const hidden = result.last_hidden_state;
      if (hidden === undefined || hidden.dims[2] !== dim) throw new EmbedAssetError(`the model gives ${hidden?.dims.join("×")} token vectors, the manifest says dim ${dim}`);
      const vector = pool(hidden.data as Float32Array, ids.length, dim, normalize);
      hidden.dispose();
      return vector;
    },
  };
}
