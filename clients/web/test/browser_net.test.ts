/**
 * The browser's verifier (browser_net.ts: @peculiar/x509 and WebCrypto) against node's (net.ts:
 * node:crypto), on round documents signed here with certificates made here: both accept a good
 * one, and both refuse each bad one (a changed field, another CA, a certificate for the other role,
 * a CA certificate as signer, a certificate not valid now, a signature that is not DER).
 */
import "reflect-metadata";
import { BasicConstraintsExtension, X509Certificate, X509CertificateGenerator } from "@peculiar/x509";
import assert from "node:assert/strict";
import { test } from "node:test";
import { hex } from "../src/bytes.js";
import { signedStatements } from "../src/canonical.js";
import { derToRaw, verifyRoundWeb } from "../src/browser_net.js";
import { VerificationError } from "../src/errors.js";
import { verifyRound } from "../src/net.js";

const EC = { name: "ECDSA", namedCurve: "P-256" };
const SIGN = { name: "ECDSA", hash: "SHA-256" };
const subtle = globalThis.crypto.subtle;
const DAY = 86_400_000;

const keys = (): Promise<CryptoKeyPair> => subtle.generateKey(EC, true, ["sign", "verify"]);

async function authority(name = "fre-e2t test CA"): Promise<{ cert: X509Certificate; keys: CryptoKeyPair }> {
  const k = await keys();
  const cert = await X509CertificateGenerator.createSelfSigned({
    name: `CN=${name}`, keys: k, signingAlgorithm: SIGN, notBefore: new Date(Date.now() - DAY), notAfter: new Date(Date.now() + 30 * DAY),
    extensions: [new BasicConstraintsExtension(true, undefined, true)],
  });
  return { cert, keys: k };
}

async function leaf(ca: { cert: X509Certificate; keys: CryptoKeyPair }, cn: string, options: { isCa?: boolean; notAfter?: Date } = {}) {
  const k = await keys();
  const cert = await X509CertificateGenerator.create({
    subject: `CN=${cn}`, issuer: ca.cert.subject, publicKey: k.publicKey, signingKey: ca.keys.privateKey, signingAlgorithm: SIGN,
    notBefore: new Date(Date.now() - DAY), notAfter: options.notAfter ?? new Date(Date.now() + 30 * DAY),
    extensions: [new BasicConstraintsExtension(options.isCa ?? false, undefined, true)],
  });
  return { cert, keys: k };
}

/** WebCrypto's r || s as the DER the servers write (cryptography's encoding). */
function rawToDer(raw: Uint8Array): Uint8Array {
  const integer = (v: Uint8Array): number[] => {
    let i = 0;
    while (i < v.length - 1 && v[i] === 0) i++;
    const body = [...v.subarray(i)];
    if (body[0] & 0x80) body.unshift(0);
    return [0x02, body.length, ...body];
  };
  const body = [...integer(raw.subarray(0, 32)), ...integer(raw.subarray(32))];
  return new Uint8Array([0x30, body.length, ...body]);
}

const BODY = '{"dim":8,"public_seed":"00ff","round_id":"r-1"';

async function signedDocument(signers: Record<string, { cert: X509Certificate; keys: CryptoKeyPair }>, body = BODY): Promise<string> {
  const { statement } = signedStatements(`${body}}`);
  const signatures: Record<string, { certificate: string; signature: string }> = {};
  for (const [role, signer] of Object.entries(signers)) {
    const raw = new Uint8Array(await subtle.sign(SIGN, signer.keys.privateKey, statement(role) as BufferSource));
    signatures[role] = { certificate: signer.cert.toString("pem"), signature: hex(rawToDer(raw)) };
  }
  return `${body},"signatures":${JSON.stringify(signatures)}}`;
}

async function bothRefuse(raw: string, ca: string, why: RegExp): Promise<void> {
  assert.throws(() => verifyRound(raw, ca), (e: unknown) => e instanceof VerificationError && why.test((e as Error).message));
  await assert.rejects(verifyRoundWeb(raw, ca), (e: unknown) => e instanceof VerificationError && why.test((e as Error).message));
}

test("node's and the browser's verifiers accept the same signed document and refuse the same forgeries", async () => {
  const ca = await authority();
  const pem = ca.cert.toString("pem");
  const tag = await leaf(ca, "S_tag"), syn = await leaf(ca, "S_syn");
  const good = await signedDocument({ S_tag: tag, S_syn: syn });
  const node = verifyRound(good, pem), web = await verifyRoundWeb(good, pem);
  assert.deepEqual(web, node);
  assert.equal((web.document as unknown as { round_id: string }).round_id, "r-1");

  await bothRefuse(good.replace('"00ff"', '"00fe"'), pem, /S_tag's signature on the round document does not verify/);
  await bothRefuse(good, (await authority("another CA")).cert.toString("pem"), /S_tag's certificate is not issued by the deployment's CA/);
  await bothRefuse(await signedDocument({ S_tag: tag, S_syn: tag }), pem, /S_syn's certificate names role S_tag/);
  await bothRefuse(await signedDocument({ S_tag: tag }), pem, /S_syn's signature on the round document is missing/);
  const caAsSigner = await leaf(ca, "S_syn", { isCa: true });
  await bothRefuse(await signedDocument({ S_tag: tag, S_syn: caAsSigner }), pem, /S_syn's certificate is not a leaf certificate/);
  const expired = await leaf(ca, "S_syn", { notAfter: new Date(Date.now() - DAY / 2) });
  await bothRefuse(await signedDocument({ S_tag: tag, S_syn: expired }), pem, /S_syn's certificate is not valid now/);
});

test("a DER ECDSA signature becomes r || s, and what is not one is refused", () => {
  const raw = new Uint8Array(64).map((_, i) => (i === 0 || i === 32 ? 0x80 : i));
  assert.deepEqual(derToRaw(rawToDer(raw)), raw);
  const short = new Uint8Array(64).map((_, i) => (i < 3 || (i >= 32 && i < 40) ? 0 : i));
  assert.deepEqual(derToRaw(rawToDer(short)), short);
  for (const bad of [new Uint8Array([0x30, 0x02, 0x02, 0x00]), new Uint8Array([0x31, 0x00]), new Uint8Array(0)]) {
    assert.throws(() => derToRaw(bad), VerificationError);
  }
});
