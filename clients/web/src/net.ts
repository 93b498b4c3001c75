/**
 * A device's network side in node (the browser's would use fetch and WebCrypto): the round
 * document fetched over HTTPS against the deployment's CA and checked as the Python users check
 * it (fre_protocol/drivers/net/signing.py: S_tag's and S_syn's ECDSA P-256 / SHA-256 signatures
 * over CONTEXT || role || 0x00 || SHA-256(canonical document), each with a certificate the CA
 * issued to that role, valid now), then the device's requests to the proxy with bounded retries
 * (425 and 5xx are retried, other 4xx are final).
 */
import { X509Certificate, verify } from "node:crypto";
import { request } from "node:https";
import { fromHex, hex } from "./bytes.js";
import { SIGNERS, signedStatements } from "./canonical.js";
import { VerificationError, isFinal, peerError, retryPause } from "./errors.js";

export { PeerError, VerificationError } from "./errors.js";
export { withoutMember } from "./canonical.js";

interface Answer {
  status: number;
  body: Uint8Array;
}

function once(url: URL, method: string, ca: string, body?: Uint8Array, token?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
    if (body) headers["content-length"] = String(body.length);
    const req = request(url, { method, ca, headers, timeout: 60_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: new Uint8Array(Buffer.concat(chunks)) }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", reject);
    req.end(body ? Buffer.from(body) : undefined);
  });
}

export class Proxy {
  readonly received: number[] = [];
  constructor(readonly base: string, readonly ca: string, readonly deadlineS = 900) {}

  /** One request, retried until a final answer or the deadline (then an Error). */
  async call(method: string, path: string, options: { body?: Uint8Array; token?: string } = {}): Promise<Uint8Array> {
    const end = Date.now() + 1000 * this.deadlineS;
    for (let attempt = 0; ; attempt++) {
      let answer: Answer | null = null;
      try {
        answer = await once(new URL(path, this.base), method, this.ca, options.body, options.token);
      } catch {
        answer = null;
      }
      if (answer !== null && answer.status < 400) {
        this.received.push(answer.body.length);
        return answer.body;
      }
      if (answer !== null && isFinal(answer.status)) throw peerError(answer.status, answer.body);
      const pause = retryPause(attempt);
      if (Date.now() + pause > end) throw new Error(`${method} ${path}: no answer within ${this.deadlineS} s`);
      await new Promise((r) => setTimeout(r, pause));
    }
  }
}

function commonName(cert: X509Certificate): string | null {
  const names = cert.subject.split("\n").filter((l) => l.startsWith("CN=")).map((l) => l.slice(3));
  return names.length === 1 ? names[0] : null;
}

/** The round document the proxy serves, once both servers' signatures verify under ``ca``. */
export async function fetchRound(proxy: Proxy): Promise<{ document: any; digest: string }> {
  return verifyRound(new TextDecoder().decode(await proxy.call("GET", "/v1/round")), proxy.ca);
}

/**
 * The served round document ``raw`` (its JSON, signatures included), once both servers'
 * signatures verify under the CA certificate ``ca`` (PEM): the digest is taken over the served
 * bytes less the ``signatures`` member, so every field the servers signed (the embedder entry
 * included) is covered as served, whatever this client reads of it.
 */
export function verifyRound(raw: string, ca: string, now: Date = new Date()): { document: any; digest: string } {
  const { signed, digest, statement } = signedStatements(raw);
  const authority = new X509Certificate(ca);
  for (const role of SIGNERS) {
    const sig = signed.signatures?.[role];
    if (!sig) throw new VerificationError(`${role}'s signature on the round document is missing`);
    const leaf = new X509Certificate(sig.certificate);
    if (!leaf.checkIssued(authority) || !leaf.verify(authority.publicKey)) {
      throw new VerificationError(`${role}'s certificate is not issued by the deployment's CA`);
    }
    for (const cert of [authority, leaf]) {
      if (!(new Date(cert.validFrom) <= now && now <= new Date(cert.validTo))) throw new VerificationError(`${role}'s certificate is not valid now`);
    }
    if (commonName(leaf) !== role) throw new VerificationError(`${role}'s certificate names role ${commonName(leaf)}`);
    if (leaf.ca) throw new VerificationError(`${role}'s certificate is not a leaf certificate`);
    if (!verify("sha256", statement(role), leaf.publicKey, fromHex(sig.signature))) {
      throw new VerificationError(`${role}'s signature on the round document does not verify under its certificate`);
    }
  }
  const { signatures: _omitted, ...document } = signed;
  return { document, digest: hex(digest) };
}
