/**
 * One user's device (fre_protocol/roles/user.py, one user), step by step:
 * prepare → blindRequest → receiveEvaluation → tagSubmission → receiveBroadcast → phase2.
 *
 * Public values come from the round document (its public seed, parameters, components and the
 * servers' keys); secret randomness from a {@link SecretRandomness}: the browser's
 * crypto.getRandomValues by default, or the recorded draws of a vector. Phase 2 takes the DDG
 * configuration and the σ_int its count asks for as inputs ({@link Phase2Inputs}), which
 * plan.ts's phase2Inputs derives from the round document (accountant.ts in DP rounds), so the
 * vectors can replay the Python values as recorded.
 */
import { concat, fromHex } from "./bytes.js";
import { type DDGConfig, encode, quantize } from "./ddg.js";
import type { EmbedderEntry } from "./embedder.js";
import { bucketEncoding } from "./grid.js";
import {
  Role, TAG_BYTES, TOKEN_BYTES, blindRequest, coverShare, decodeEvaluation, sealedEnvelope, shareSubmission, tagSubmission,
} from "./messages.js";
import { sampleDiscreteGaussian } from "./noise.js";
import { cryptoBytes, uniformFromBytes } from "./random.js";
import { type HeardBroadcast, hear } from "./ribbon.js";
import { type EphemeralKey, sealWith, seedKeypair } from "./seal.js";
import { share, shareRandomBytes, shareSizes } from "./sharing.js";
import { blind, scalarFromUniform, verifyAndFinalize } from "./voprf.js";

export type SealKind = "blind_request" | "tag_submission" | "share_to_tag" | "share_to_syn";

/** The device's secret draws, by purpose (each called once per use, in any order). */
export interface SecretRandomness {
  blindBytes(): Uint8Array; // 64 bytes, reduced mod the group order
  sealSeed(kind: SealKind): Uint8Array; // 32 bytes: the ephemeral key pair's seed
  token(): Uint8Array; // 32 bytes
  roundingBytes(n: number): Uint8Array; // 8 bytes a coin
  noise(sigma: number, n: number): bigint[]; // discrete Gaussian integers
  shareBytes(n: number): Uint8Array; // the share seed (32 bytes), or an explicit mask's stream
  contributionId(): Uint8Array; // 16 bytes
  coverToken(): Uint8Array; // 32 bytes
}

const fresh = (n: number): Uint8Array => globalThis.crypto.getRandomValues(new Uint8Array(n));

/** crypto.getRandomValues, and the noise sampled from it (the default "fast-vectorized" sampler). */
export const cryptoRandomness: SecretRandomness = {
  blindBytes: () => fresh(64),
  sealSeed: () => fresh(32),
  token: () => fresh(TOKEN_BYTES),
  roundingBytes: (n) => fresh(8 * n),
  noise: (sigma, n) => sampleDiscreteGaussian(sigma, n, cryptoBytes),
  shareBytes: (n) => fresh(n),
  contributionId: () => fresh(16),
  coverToken: () => fresh(TOKEN_BYTES),
};

/** The round document as served by the proxy (its JSON, signatures aside). */
export interface RoundDocument {
  public_seed: string;
  dim: number;
  noise: boolean;
  params: { k: number; radius: number; edge_multiplier: number; [key: string]: unknown };
  components: Record<string, string>;
  protocol: Record<string, unknown>;
  public_keys: { voprf: string; S_tag_box: string; S_syn_box: string };
  /** The model a device embeds its text with (absent: the round names none); see embedder.ts. */
  embedder?: EmbedderEntry;
}

/** What the device derives from the broadcast that this client is given (see the module doc). */
export interface Phase2Inputs {
  ddgConfig: DDGConfig;
  sigmaInt: number;
}

export interface Sent {
  step: "blind_request" | "tag_submission" | "phase2";
  recipient: "S_tag" | "S_syn";
  envelope: Uint8Array;
  plaintext: Uint8Array;
}

export class Device {
  readonly bucket: Uint8Array;
  readonly sent: Sent[] = [];
  tag: Uint8Array | null = null;
  count: number | null = null;
  private scalar: Uint8Array | null = null;
  private blinded: Uint8Array | null = null;
  private seals = new Map<SealKind, EphemeralKey>();
  private tokenValue: Uint8Array | null = null;
  /** The broadcast as this device heard it (null before receiveBroadcast). */
  heard: HeardBroadcast | null = null;
  private readonly keys: { voprf: Uint8Array; S_tag: Uint8Array; S_syn: Uint8Array };

  constructor(
    readonly round: RoundDocument, readonly embedding: number[], readonly coin: boolean,
    private readonly rnd: SecretRandomness = cryptoRandomness,
  ) {
    if (embedding.length !== round.dim) throw new Error(`the round's dimension is ${round.dim}, the embedding's ${embedding.length}`);
    this.bucket = bucketEncoding(embedding, fromHex(round.public_seed), round.params);
    this.keys = {
      voprf: fromHex(round.public_keys.voprf), S_tag: fromHex(round.public_keys.S_tag_box), S_syn: fromHex(round.public_keys.S_syn_box),
    };
  }

  /** Offline: the blind r and the ephemeral key of each sealed box the device will send. */
  prepare(): void {
    this.scalar = scalarFromUniform(this.rnd.blindBytes());
    const kinds: SealKind[] = ["blind_request", ...(this.coin ? ["tag_submission" as const] : []), "share_to_tag", "share_to_syn"];
    for (const kind of kinds) this.seals.set(kind, seedKeypair(this.rnd.sealSeed(kind)));
  }

  private seal(kind: SealKind, step: Sent["step"], recipient: Sent["recipient"], plaintext: Uint8Array): Uint8Array {
    const key = this.seals.get(kind);
    if (key === undefined) throw new Error(`no prepared seal for ${kind}`);
    this.seals.delete(kind);
    const envelope = sealedEnvelope(Role[recipient === "S_tag" ? "S_TAG" : "S_SYN"], sealWith(key, this.keys[recipient], plaintext));
    this.sent.push({ step, recipient, envelope, plaintext });
    return envelope;
  }

  blindRequest(): Uint8Array {
    if (this.scalar === null) throw new Error("prepare() first");
    this.blinded = blind(this.bucket, this.scalar);
    return this.seal("blind_request", "blind_request", "S_tag", blindRequest(this.blinded));
  }

  /** S_tag's Evaluation: the proof verified (throws otherwise), the tag finalized. */
  receiveEvaluation(message: Uint8Array): Uint8Array {
    if (this.scalar === null || this.blinded === null) throw new Error("blindRequest() first");
    const { evaluated, proof } = decodeEvaluation(message);
    const output = verifyAndFinalize(this.bucket, this.scalar, evaluated, this.blinded, this.keys.voprf, proof);
    this.tag = output.slice(0, TAG_BYTES);
    return this.tag;
  }

  /** With its coin: the sealed TagSubmission to S_syn (null without). */
  tagSubmission(): Uint8Array | null {
    if (!this.coin || this.tag === null) return null;
    this.tokenValue = this.rnd.token();
    return this.seal("tag_submission", "tag_submission", "S_syn", tagSubmission(this.tag, this.tokenValue));
  }

  receiveBroadcast(message: Uint8Array): number | null {
    this.heard = hear(message, this.round.components.broadcast ?? "ribbon-classes");
    this.count = this.tokenValue !== null && this.tag !== null ? this.heard.query(this.tag) : null;
    return this.count;
  }

  /** Two envelopes (to S_tag, to S_syn): shares when its submitted tag was released, cover otherwise. */
  phase2(inputs: Phase2Inputs): [Uint8Array, Uint8Array] {
    const config = inputs.ddgConfig;
    const [seedSize, explicitSize] = shareSizes(config.padded_dim, config.modulus_bits);
    if (this.count !== null && this.tag !== null && this.tokenValue !== null) {
      const coins = uniformFromBytes(this.rnd.roundingBytes(config.padded_dim));
      const q = quantize(this.embedding, config, coins);
      const noise = this.round.noise && inputs.sigmaInt > 0 ? this.rnd.noise(inputs.sigmaInt, config.padded_dim) : q.map(() => 0n);
      const random = this.rnd.shareBytes(shareRandomBytes(config.padded_dim, config.modulus_bits));
      const [first, second] = share(encode(q, noise, config), config.modulus_bits, random);
      const cid = this.rnd.contributionId();
      return [
        this.seal("share_to_tag", "phase2", "S_tag", shareSubmission(this.tag, cid, this.tokenValue, first)),
        this.seal("share_to_syn", "phase2", "S_syn", shareSubmission(this.tag, cid, this.tokenValue, second)),
      ];
    }
    const [a, b] = [this.rnd.coverToken(), this.rnd.coverToken()];
    return [
      this.seal("share_to_tag", "phase2", "S_tag", coverShare(seedSize, a)),
      this.seal("share_to_syn", "phase2", "S_syn", coverShare(explicitSize, b)),
    ];
  }
}

export { concat };
