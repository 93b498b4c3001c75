/**
 * The embedder a round document names (fre_protocol/drivers/net/round.py, EmbedderSpec): the model
 * a device embeds its text with and no other, its output dimension (the round's) and whether its
 * rows are unit norm. A document without the entry (written before it existed, or a round on
 * given embeddings) names none. This client does not embed: it is given an embedding, which may
 * declare the model that made it (``{"embedder": NAME, "embedding": [...]}``); one that declares
 * another model than the round's is refused before anything is sent.
 */
import type { RoundDocument } from "./user.js";

export interface EmbedderEntry {
  name: string;
  dim: number;
  normalize: boolean;
}

export class EmbedderError extends Error {}

/** The packaged default's id, and the names fre_protocol/text/embedder.py takes for it. */
export const DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2";
const DEFAULT_ALIASES = new Set(["default", "all-MiniLM-L6-v2", DEFAULT_MODEL_ID]);

/** A model's id as a round document names it (the default's aliases are its id). */
export const modelId = (name: string): string => (DEFAULT_ALIASES.has(name) ? DEFAULT_MODEL_ID : name);

/** The round's embedder (null: it names none), checked as the Python settings check it. */
export function roundEmbedder(round: RoundDocument): EmbedderEntry | null {
  const entry = (round as { embedder?: unknown }).embedder;
  if (entry === undefined) return null;
  if (entry === null || typeof entry !== "object" || Array.isArray(entry)) {
    throw new EmbedderError(`the round document's embedder must be an object with keys [dim, name, normalize], got ${JSON.stringify(entry)}`);
  }
  const keys = Object.keys(entry).sort();
  if (keys.join(",") !== "dim,name,normalize") {
    throw new EmbedderError(`the round document's embedder must have exactly the keys [dim, name, normalize], got [${keys.join(", ")}]`);
  }
  const { name, dim, normalize } = entry as Record<string, unknown>;
  if (typeof name !== "string" || name.trim() === "") throw new EmbedderError(`the round's embedder name must be a non-empty string, got ${JSON.stringify(name)}`);
  if (typeof dim !== "number" || !Number.isInteger(dim) || dim < 1) throw new EmbedderError(`the round's embedder dim must be an integer >= 1, got ${JSON.stringify(dim)}`);
  if (typeof normalize !== "boolean") throw new EmbedderError(`the round's embedder normalize must be true or false, got ${JSON.stringify(normalize)}`);
  if (dim !== round.dim) {
    throw new EmbedderError(`embedder '${name}' gives ${dim}-dimensional embeddings, but the round's dim is ${round.dim}: they must be equal`);
  }
  return { name, dim, normalize };
}

export const describeEmbedder = (e: EmbedderEntry): string => `${e.name} (d = ${e.dim}${e.normalize ? ", unit norm" : ""})`;

/**
 * The device's embedding from its file's JSON (a list of numbers, or ``{"embedder": NAME,
 * "embedding": [...]}``) and the line that names the round's embedder; EmbedderError when the
 * file declares another model than the round's, or the round's model gives unit-norm rows and
 * this one is not.
 */
export function deviceEmbedding(round: RoundDocument, file: unknown): { embedding: number[]; line: string } {
  const named = roundEmbedder(round);
  let embedding: unknown = file, declared: string | null = null;
  if (file !== null && typeof file === "object" && !Array.isArray(file)) {
    const { embedder, embedding: rows, ...rest } = file as Record<string, unknown>;
    if (Object.keys(rest).length > 0) throw new EmbedderError(`the embedding file has unknown keys [${Object.keys(rest).sort().join(", ")}] (expected embedder, embedding)`);
    if (embedder !== undefined && typeof embedder !== "string") throw new EmbedderError(`the embedding file's embedder must be a model name, got ${JSON.stringify(embedder)}`);
    declared = embedder === undefined ? null : modelId(embedder);
    embedding = rows;
  }
  if (!Array.isArray(embedding) || !embedding.every((v) => typeof v === "number" && Number.isFinite(v))) {
    throw new EmbedderError("the embedding must be a JSON list of finite numbers (or {\"embedder\": NAME, \"embedding\": [...]})");
  }
  if (named !== null && declared !== null && declared !== named.name) {
    throw new EmbedderError(`the embedding was made by '${declared}', but the round's embedder is '${named.name}' (d = ${named.dim}): a device embeds with the round's model only`);
  }
  if (embedding.length !== round.dim) throw new EmbedderError(`the round's dimension is ${round.dim}, the embedding's is ${embedding.length}`);
  if (named !== null && named.normalize) {
    const norm = Math.sqrt(embedding.reduce((s: number, v: number) => s + v * v, 0));
    if (Math.abs(norm - 1) > 1e-2) {
      throw new EmbedderError(`the round's embedder '${named.name}' gives unit-norm rows, the embedding's norm is ${norm.toPrecision(6)}: embed with the round's model`);
    }
  }
  const line = named !== null
    ? `embedder ${describeEmbedder(named)} (named by the round${declared !== null ? "; the embedding declares it" : "; the embedding declares no model, not checked"})`
    : `embedder: the round names none${declared !== null ? ` (the embedding declares ${declared}, not checked)` : " (the embedding is given)"}`;
  return { embedding: embedding as number[], line };
}
