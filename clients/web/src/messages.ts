/**
 * The protocol messages a device writes and reads (fre_protocol/messages.py): a type byte, then
 * the fields; variable fields are a big-endian u32 length and the bytes.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { concat, u32be, utf8 } from "./bytes.js";

export const TAG_BYTES = 32;
export const TOKEN_BYTES = 32;
export const CONTRIBUTION_ID_BYTES = 16;
const TOKEN_DOMAIN = concat(utf8("fre-e2t/contribution-token/v1"), new Uint8Array([0]));

export const Type = {
  BLIND_REQUEST: 0x01,
  EVALUATION: 0x02,
  TAG_SUBMISSION: 0x04,
  SHARE_SUBMISSION: 0x06,
  SEALED_ENVELOPE: 0x09,
  COVER_SHARE: 0x0b,
  COMPACT_BROADCAST: 0x0d,
} as const;

export const Role = { USER: 1, S_TAG: 2, S_SYN: 3 } as const;

const variable = (data: Uint8Array): Uint8Array => concat(u32be(data.length), data);
const typed = (type: number, ...fields: Uint8Array[]): Uint8Array => concat(new Uint8Array([type]), ...fields);

function check(name: string, data: Uint8Array, length: number): Uint8Array {
  if (data.length !== length) throw new Error(`${name} must be ${length} bytes, got ${data.length}`);
  return data;
}

/** H(t): SHA-256 of the token under the protocol's domain label. */
export const tokenHash = (token: Uint8Array): Uint8Array => sha256(concat(TOKEN_DOMAIN, check("token", token, TOKEN_BYTES)));

export const blindRequest = (blinded: Uint8Array): Uint8Array => typed(Type.BLIND_REQUEST, check("blinded element", blinded, 32));

export const tagSubmission = (tag: Uint8Array, token: Uint8Array): Uint8Array =>
  typed(Type.TAG_SUBMISSION, check("tag", tag, TAG_BYTES), tokenHash(token));

export const shareSubmission = (tag: Uint8Array, contributionId: Uint8Array, token: Uint8Array, share: Uint8Array): Uint8Array =>
  typed(Type.SHARE_SUBMISSION, check("tag", tag, TAG_BYTES), check("contribution id", contributionId, CONTRIBUTION_ID_BYTES),
    check("token", token, TOKEN_BYTES), variable(share));

/** Cover traffic as long as a ShareSubmission with a ``shareBytes`` share. */
export const coverShare = (shareBytes: number, token: Uint8Array): Uint8Array =>
  typed(Type.COVER_SHARE, check("token", token, TOKEN_BYTES), variable(new Uint8Array(TAG_BYTES + CONTRIBUTION_ID_BYTES + shareBytes)));

export const sealedEnvelope = (recipient: number, ciphertext: Uint8Array): Uint8Array =>
  typed(Type.SEALED_ENVELOPE, new Uint8Array([recipient]), variable(ciphertext));

/** The proxy's batch of a device's phase-2 envelopes (fre_protocol/drivers/net/wire.py). */
export const phase2Batch = (envelopes: Uint8Array[]): Uint8Array =>
  concat(u32be(envelopes.length), ...envelopes.map(variable));

class Reader {
  private at = 0;
  constructor(private readonly data: Uint8Array) {}
  take(n: number, what: string): Uint8Array {
    if (this.at + n > this.data.length) throw new Error(`message truncated: ${what} needs ${n} bytes`);
    const out = this.data.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }
  u8(what: string): number {
    return this.take(1, what)[0];
  }
  u32(what: string): number {
    const b = this.take(4, what);
    return new DataView(b.buffer, b.byteOffset, 4).getUint32(0, false);
  }
  variable(what: string): Uint8Array {
    return this.take(this.u32(`${what} length`), what);
  }
  finish(): void {
    if (this.at !== this.data.length) throw new Error(`message has ${this.data.length - this.at} trailing bytes`);
  }
}

function reader(data: Uint8Array, type: number, name: string): Reader {
  const r = new Reader(data);
  const got = r.u8("type");
  if (got !== type) throw new Error(`expected a ${name} (type ${type}), got type ${got}`);
  return r;
}

export function decodeEvaluation(data: Uint8Array): { evaluated: Uint8Array; proof: Uint8Array } {
  const r = reader(data, Type.EVALUATION, "Evaluation");
  const out = { evaluated: r.take(32, "evaluated element"), proof: r.take(64, "proof") };
  r.finish();
  return out;
}

export function decodeCompactBroadcast(data: Uint8Array): { encoding: string; maxCount: number; body: Uint8Array } {
  const r = reader(data, Type.COMPACT_BROADCAST, "CompactBroadcast");
  const encoding = new TextDecoder().decode(r.take(r.u8("encoding length"), "encoding"));
  const out = { encoding, maxCount: r.u32("max_count"), body: r.variable("body") };
  r.finish();
  return out;
}
