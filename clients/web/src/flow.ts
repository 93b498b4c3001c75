/**
 * One device's part in a round, step by step, the same in node (join.ts) and in a browser
 * (page/main.ts): the drivers only move messages. What differs between them is passed in: how a
 * request reaches the proxy (a {@link Transport}), how the round document's signatures are
 * checked (against the CA the person chose), where the embedding comes from, and what is shown
 * of each step (a progress callback). Every check comes before the message that depends on it,
 * and an error ends the flow: nothing is sent after a failure.
 */
import { PeerError, VerificationError } from "./errors.js";
import { phase2Batch } from "./messages.js";
import { phase2Inputs } from "./plan.js";
import { cryptoBytes, uniformOf } from "./random.js";
import { Device, type RoundDocument, type SecretRandomness, type Sent, cryptoRandomness } from "./user.js";

/** A request to the proxy, retried as the driver sees fit; a final refusal is a PeerError. */
export interface Transport {
  call(method: string, path: string, options?: { body?: Uint8Array; token?: string }): Promise<Uint8Array>;
}

export type StepName = "round" | "embedding" | "blind" | "evaluation" | "submit" | "broadcast" | "phase2";

/** One step done: its device-side work and its waiting on the network (ms), the bytes each way. */
export interface StepReport {
  step: StepName;
  computeMs: number;
  networkMs: number;
  sentBytes: number;
  receivedBytes: number;
  /** What the step has to say (the round's id and dimension, the embedder line, skipped…). */
  note: string;
}

/** A request the device made that carried its messages: the step, the body, its envelopes. */
export interface SentRequest {
  step: "phase1" | "submit" | "phase2";
  size: number;
  sent: Sent[];
}

export interface FlowOptions {
  transport: Transport;
  /** The credential, sent as a bearer token with each of the device's requests. */
  token: string;
  /** The served round document (its JSON), checked against the CA the person chose. */
  verifyRound(raw: string): Promise<{ document: RoundDocument; digest: string }>;
  /** The device's embedding for this round and the line naming its embedder, checked before anything is sent. */
  embedding(document: RoundDocument): Promise<{ embedding: number[]; line: string }>;
  progress?(report: StepReport): void;
  /** "start" before each step's work (for a progress line that shows what is under way). */
  starting?(step: StepName): void;
  randomness?: SecretRandomness;
}

export interface FlowOutcome {
  document: RoundDocument;
  digest: string;
  device: Device;
  requests: SentRequest[];
  steps: StepReport[];
}

const now = (): number => globalThis.performance.now();

/** Play the device's part: round document, embedding, blind request, evaluation, tag, broadcast, phase 2. */
export async function playDevice(options: FlowOptions): Promise<FlowOutcome> {
  const { transport, token } = options;
  const steps: StepReport[] = [];
  let current: StepReport | null = null;
  const begin = (step: StepName): StepReport => {
    options.starting?.(step);
    current = { step, computeMs: 0, networkMs: 0, sentBytes: 0, receivedBytes: 0, note: "" };
    return current;
  };
  const end = (): void => {
    steps.push(current!);
    options.progress?.(current!);
  };
  const work = async <T>(fn: () => T | Promise<T>): Promise<T> => {
    const t0 = now();
    try {
      return await fn();
    } finally {
      current!.computeMs += now() - t0;
    }
  };
  const call = async (method: string, path: string, body?: Uint8Array, auth = true): Promise<Uint8Array> => {
    const t0 = now();
    try {
      const answer = await transport.call(method, path, { body, token: auth ? token : undefined });
      current!.receivedBytes += answer.length;
      return answer;
    } finally {
      current!.networkMs += now() - t0;
      current!.sentBytes += body?.length ?? 0;
    }
  };

  let step = begin("round");
  const raw = new TextDecoder().decode(await call("GET", "/v1/round", undefined, false));
  const { document, digest } = await work(() => options.verifyRound(raw));
  step.note = `round '${(document as { round_id?: string }).round_id}' (signed by S_tag and S_syn), d = ${document.dim}`;
  end();

  step = begin("embedding");
  const { embedding, line } = await work(() => options.embedding(document));
  step.note = line;
  end();

  step = begin("blind");
  const device = await work(() => {
    const p = document.params;
    const ps = p.epsilon === "inf" ? 1.0 : Number(p.p_sample);
    const coin = uniformOf(cryptoBytes, 1)[0] < ps;
    const made = new Device(document, embedding, coin, options.randomness ?? cryptoRandomness);
    made.prepare();
    return made;
  });
  const request = await work(() => device.blindRequest());
  const ticket = JSON.parse(new TextDecoder().decode(await call("POST", "/v1/phase1", request)));
  end();

  begin("evaluation");
  const evaluation = await call("GET", `/v1/phase1/${ticket.ticket}?wait=10`);
  await work(() => {
    try {
      device.receiveEvaluation(evaluation);
    } catch (err) {
      throw new VerificationError(`S_tag's answer did not verify: ${(err as Error).message}`);
    }
  });
  end();

  step = begin("submit");
  const submission = await work(() => device.tagSubmission());
  if (submission !== null) await call("POST", "/v1/submit", submission);
  else step.note = "not sampled: no tag submission";
  end();

  begin("broadcast");
  const broadcast = await call("GET", "/v1/broadcast", undefined, false);
  await work(() => device.receiveBroadcast(broadcast));
  end();

  step = begin("phase2");
  const body = await work(() => phase2Batch(device.phase2(phase2Inputs(document, device.heard!.maxCount, device.count))));
  await call("POST", "/v1/phase2", body);
  step.note = device.count !== null ? "shares" : "cover messages";
  end();

  const requests: SentRequest[] = [
    { step: "phase1", size: request.length, sent: device.sent.slice(0, 1) },
    ...(submission !== null ? [{ step: "submit" as const, size: submission.length, sent: device.sent.slice(1, 2) }] : []),
    { step: "phase2", size: body.length, sent: device.sent.slice(-2) },
  ];
  return { document, digest, device, requests, steps };
}

/** The message types inside a request's envelopes, as ``fre-e2t join`` names them. */
export const INNER: Record<SentRequest["step"], string> = {
  phase1: "BlindRequest", submit: "TagSubmission", phase2: "ShareSubmission or CoverShare",
};

export type RefusalKind = "verification" | "credential" | "closed" | "error";

/**
 * Why the flow stopped, as ``fre-e2t join`` tells it: a check that failed (exit 5), the
 * credential refused (4), the round closed for this request (3), anything else (2).
 */
export function refusal(err: unknown): { kind: RefusalKind; status: number; detail: string } {
  if (err instanceof VerificationError) return { kind: "verification", status: 5, detail: err.message };
  if (err instanceof PeerError && ["RateLimitedError", "RefusalBudgetError", "UnauthorizedError"].includes(err.kind)) {
    return { kind: "credential", status: 4, detail: err.detail };
  }
  if (err instanceof PeerError && err.kind === "ProtocolStateError" && err.detail.includes("the round is in")) {
    return { kind: "closed", status: 3, detail: err.detail };
  }
  return { kind: "error", status: 2, detail: err instanceof Error ? err.message : String(err) };
}
