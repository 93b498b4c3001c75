/**
 * The page's text path: the person's text embedded on this device with the round's embedder.
 * The on-device embedder (onnxruntime-web, its assets served same-origin under /web/assets/) is
 * not in this build yet, so a text is refused before anything is sent and the page asks for a
 * given embedding instead.
 */
import type { RoundDocument } from "../user.js";

export async function embedText(document: RoundDocument, text: string): Promise<{ embedding: number[]; line: string }> {
  void document;
  void text;
  throw new Error("this page cannot embed text on this device yet: use a given embedding (JSON)");
}
