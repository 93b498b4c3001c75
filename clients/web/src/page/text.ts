/**
 * The page's text path: the person's text embedded on this device with the round's embedder
 * (embed.ts: onnxruntime-web and the tokenizer, their files served by the proxy under
 * /web/assets/ and checked against the assets' manifest). A round that names no embedder, or
 * another model than the assets hold, is refused before anything is sent: a device embeds with
 * the round's model only. The model, once loaded, is kept for another join from the same page
 * (it holds nothing of the person's).
 */
import { type DeviceEmbedder, assetsAtUrl, loadEmbedder } from "../embed.js";
import { EmbedderError, describeEmbedder, modelId, roundEmbedder } from "../embedder.js";
import type { RoundDocument } from "../user.js";

/** Where the proxy serves the embedder's assets (fre_protocol/drivers/net/web_static.py). */
export const ASSETS = "/web/assets/";

let loading: Promise<DeviceEmbedder> | null = null;

function embedder(): Promise<DeviceEmbedder> {
  loading ??= loadEmbedder(assetsAtUrl(ASSETS)).catch((err) => {
    loading = null; // a failed load is tried again on the next join
    throw err;
  });
  return loading;
}

export async function embedText(document: RoundDocument, text: string): Promise<{ embedding: number[]; line: string }> {
  const named = roundEmbedder(document);
  if (named === null) {
    throw new EmbedderError("the round document names no embedder, so this page cannot embed a text for it: use a given embedding (JSON)");
  }
  const t0 = performance.now();
  const model = await embedder();
  const t1 = performance.now();
  if (modelId(model.name) !== named.name || model.dim !== named.dim || model.normalize !== named.normalize) {
    throw new EmbedderError(`this page's embedder is '${model.name}' (d = ${model.dim}), the round's is ${describeEmbedder(named)}: a device embeds with the round's model only`);
  }
  const embedding = await model.embed(text);
  const times = `model ready in ${(t1 - t0).toFixed(0)} ms, text embedded in ${(performance.now() - t1).toFixed(0)} ms`;
  return { embedding, line: `embedder ${describeEmbedder(named)} (named by the round; your text embedded on this device: ${times})` };
}
