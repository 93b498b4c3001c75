/**
 * A device's network side in a browser: requests to the proxy that served the page (same
 * origin, relative URLs, bounded retries as net.ts makes them: 425 and 5xx are retried, other 4xx
 * are final), and the round document's two signatures checked against the CA certificate the
 * person chose, not one the page or the proxy supplies, with exactly the checks net.ts's
 * verifyRound makes in node: each certificate issued by the CA (its issuer the CA's subject, its
 * signature the CA's), the CA's and the leaf's validity now, CN = the role, a leaf (not a CA),
 * and ECDSA P-256 / SHA-256 over the statement canonical.ts builds, verified with WebCrypto.
 */
import "reflect-metadata";
import { BasicConstraintsExtension, X509Certificate } from "@peculiar/x509";
import { hex } from "./bytes.js";
import { SIGNERS, signedStatements } from "./canonical.js";
import { VerificationError, isFinal, peerError, retryPause } from "./errors.js";
import type { Transport } from "./flow.js";
import type { RoundDocument } from "./user.js";

/** Requests to the page's own origin with fetch (no cookies, no cache), retried up to the deadline. */
export class FetchTransport implements Transport {
  readonly received: number[] = [];
  constructor(readonly deadlineS = 900) {}

  async call(method: string, path: string, options: { body?: Uint8Array; token?: string } = {}): Promise<Uint8Array> {
    if (!path.startsWith("/v1/")) throw new Error(`the device talks to the proxy's /v1/ endpoints only, got ${path}`);
    const end = Date.now() + 1000 * this.deadlineS;
    for (let attempt = 0; ; attempt++) {
      let status = 0, body = new Uint8Array(0);
      try {
        const response = await fetch(path, {
          method, credentials: "omit", cache: "no-store", redirect: "error",
          headers: options.token ? { authorization: `Bearer ${options.token}` } : {},
          body: options.body as BodyInit | undefined,
        });
        status = response.status;
        body = new Uint8Array(await response.arrayBuffer());
      } catch {
        status = 0;
      }
      if (status !== 0 && status < 400) {
        this.received.push(body.length);
        return body;
      }
      if (status !== 0 && isFinal(status)) throw peerError(status, body);
      const pause = retryPause(attempt);
      if (Date.now() + pause > end) throw new Error(`${method} ${path}: no answer within ${this.deadlineS} s`);
      await new Promise((r) => setTimeout(r, pause));
    }
  }
}

/** An ECDSA signature's DER (SEQUENCE of two INTEGERs) as WebCrypto's raw r || s, each ``size`` bytes. */
export function derToRaw(der: Uint8Array, size = 32): Uint8Array {
  const fail = (): never => {
    throw new VerificationError("the signature is not a DER ECDSA signature");
  };
  let at = 0;
  const length = (): number => {
    let n = der[at++];
    if (n === undefined) fail();
    if (n & 0x80) {
      const bytes = n & 0x7f;
      if (bytes < 1 || bytes > 2) fail();
      n = 0;
      for (let i = 0; i < bytes; i++) n = (n << 8) | der[at++];
    }
    return n;
  };
  if (der[at++] !== 0x30) fail();
  if (length() !== der.length - at) fail();
  const out = new Uint8Array(2 * size);
  for (const half of [0, 1]) {
    if (der[at++] !== 0x02) fail();
    const n = length();
    let value = der.subarray(at, at + n);
    at += n;
    if (value.length !== n || n === 0) fail();
    while (value.length > 1 && value[0] === 0) value = value.subarray(1);
    if (value.length > size) fail();
    out.set(value, half * size + size - value.length);
  }
  if (at !== der.length) fail();
  return out;
}

function readCertificate(pem: string, what: string): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch (err) {
    throw new VerificationError(`${what} is not a certificate (PEM): ${(err as Error).message}`);
  }
}

const validAt = (cert: X509Certificate, now: Date): boolean => cert.notBefore <= now && now <= cert.notAfter;

/**
 * The served round document ``raw`` (its JSON, signatures included), once both servers'
 * signatures verify under the CA certificate ``ca`` (PEM); VerificationError otherwise.
 */
export async function verifyRoundWeb(raw: string, ca: string, now: Date = new Date()): Promise<{ document: RoundDocument; digest: string }> {
  const { signed, digest, statement } = signedStatements(raw);
  const authority = readCertificate(ca, "the CA you chose");
  const subtle = globalThis.crypto.subtle;
  for (const role of SIGNERS) {
    const sig = signed.signatures?.[role];
    if (!sig) throw new VerificationError(`${role}'s signature on the round document is missing`);
    const leaf = readCertificate(sig.certificate, `${role}'s certificate`);
    const issued = leaf.issuer === authority.subject
      && await leaf.verify({ publicKey: authority.publicKey, signatureOnly: true }).catch(() => false);
    if (!issued) throw new VerificationError(`${role}'s certificate is not issued by the deployment's CA`);
    for (const cert of [authority, leaf]) {
      if (!validAt(cert, now)) throw new VerificationError(`${role}'s certificate is not valid now`);
    }
    const names = leaf.subjectName.getField("CN");
    const cn = names.length === 1 ? names[0] : null;
    if (cn !== role) throw new VerificationError(`${role}'s certificate names role ${cn}`);
    if (leaf.getExtension(BasicConstraintsExtension)?.ca) throw new VerificationError(`${role}'s certificate is not a leaf certificate`);
    const ecdsa = { name: "ECDSA", namedCurve: "P-256" };
    let key: CryptoKey;
    try {
      key = await subtle.importKey("spki", leaf.publicKey.rawData, ecdsa, false, ["verify"]);
    } catch {
      throw new VerificationError(`${role}'s certificate does not hold an ECDSA P-256 key`);
    }
    const hexSig: string = String(sig.signature);
    const der = new Uint8Array((hexSig.match(/../g) ?? []).map((b) => parseInt(b, 16)));
    const ok = await subtle.verify({ name: "ECDSA", hash: "SHA-256" }, key, derToRaw(der) as BufferSource, statement(role) as BufferSource);
    if (!ok) throw new VerificationError(`${role}'s signature on the round document does not verify under its certificate`);
  }
  const { signatures: _omitted, ...document } = signed;
  return { document, digest: hex(digest) };
}
