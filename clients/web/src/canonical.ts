/**
 * The bytes the servers sign on a round document (fre_protocol/drivers/net/signing.py):
 * CONTEXT || role || 0x00 || SHA-256(the served JSON less its ``signatures`` member), so every
 * field they signed is covered as served, whatever a client reads of it. Shared by node's
 * verifier (net.ts, node:crypto) and the browser's (browser_net.ts, WebCrypto).
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { concat, utf8 } from "./bytes.js";

/** The roles whose signatures a round document carries, in the order they are checked. */
export const SIGNERS = ["S_tag", "S_syn"] as const;

const CONTEXT = concat(utf8("fre-e2t round document v1"), new Uint8Array([0]));

/** The raw JSON without its top-level ``key`` member (the canonical document the servers signed). */
export function withoutMember(raw: string, key: string): string {
  let depth = 0, inString = false, escaped = false, keyStart = -1;
  let memberStart = -1;
  for (let i = 0; i < raw.length; i++) {
    const ch = raw[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (ch === "\\") escaped = true;
      else if (ch === '"') {
        inString = false;
        if (keyStart >= 0 && depth === 1 && raw[i + 1] === ":" && JSON.parse(raw.slice(keyStart, i + 1)) === key) {
          memberStart = raw[keyStart - 1] === "," ? keyStart - 1 : keyStart;
        }
        keyStart = -1;
      }
      continue;
    }
    if (ch === '"') {
      inString = true;
      if (depth === 1 && (raw[i - 1] === "{" || raw[i - 1] === ",")) keyStart = i;
    } else if (ch === "{" || ch === "[") depth++;
    else if (ch === "}" || ch === "]" || ch === ",") {
      if (memberStart >= 0 && depth === 1 && i > memberStart + key.length + 3) {
        const end = raw[memberStart] === "," ? i : i + (ch === "," ? 1 : 0);
        return raw.slice(0, memberStart) + raw.slice(end);
      }
      if (ch !== ",") depth--;
    }
  }
  if (memberStart >= 0) throw new Error("unterminated member");
  return raw;
}

/** The served document parsed, the digest of its canonical bytes, and the statement each role signed. */
export function signedStatements(raw: string): { signed: any; digest: Uint8Array; statement: (role: string) => Uint8Array } {
  const signed = JSON.parse(raw);
  const digest = sha256(utf8(withoutMember(raw, "signatures")));
  return { signed, digest, statement: (role) => concat(CONTEXT, utf8(role), new Uint8Array([0]), digest) };
}
