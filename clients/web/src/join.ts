/**
 * ``node dist/src/join.js --round URL --ca ca.pem --credential FILE --embedding X.json``: one
 * device in a running round, as ``fre-e2t join`` plays it, from this client (the embedding is
 * given: a JSON list of the round's dimension, or ``{"embedder": NAME, "embedding": [...]}``
 * naming the model that made it). It prints the embedder the round names, and refuses an
 * embedding that declares another model (or, for a model of unit-norm rows, is not unit norm)
 * before anything is sent. Exit 0 done; 3 round closed; 4 credential refused; 5 a signature or
 * proof did not verify; 2 anything else (one line on stderr).
 */
import { readFileSync } from "node:fs";
import { hex } from "./bytes.js";
import { deviceEmbedding } from "./embedder.js";
import { phase2Batch } from "./messages.js";
import { PeerError, Proxy, VerificationError, fetchRound } from "./net.js";
import { phase2Inputs } from "./plan.js";
import { cryptoBytes, uniformOf } from "./random.js";
import { Device } from "./user.js";

function option(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

async function main(): Promise<number> {
  const url = option("--round"), caFile = option("--ca"), credFile = option("--credential"), embFile = option("--embedding");
  if (!url || !caFile || !credFile || !embFile) {
    console.error("usage: join --round URL --ca ca.pem --credential FILE --embedding X.json [--show-bucket] [--deadline S]");
    return 2;
  }
  const proxy = new Proxy(url, readFileSync(caFile, "utf8"), Number(option("--deadline") ?? 900));
  const token = readFileSync(credFile, "utf8").trim();
  try {
    const { document } = await fetchRound(proxy);
    console.log(`join (TypeScript): round '${document.round_id}' (signed by S_tag and S_syn), d = ${document.dim}`);
    // Checked before anything is sent.
    const { embedding, line } = deviceEmbedding(document, JSON.parse(readFileSync(embFile, "utf8")));
    console.log(`  ${line}`);
    const p = document.params;
    const ps = p.epsilon === "inf" ? 1.0 : Number(p.p_sample);
    const coin = uniformOf(cryptoBytes, 1)[0] < ps;
    const device = new Device(document, embedding, coin);
    device.prepare();
    const ticket = JSON.parse(new TextDecoder().decode(await proxy.call("POST", "/v1/phase1", { body: device.blindRequest(), token })));
    const evaluation = await proxy.call("GET", `/v1/phase1/${ticket.ticket}?wait=10`, { token });
    try {
      device.receiveEvaluation(evaluation);
    } catch (err) {
      throw new VerificationError(`S_tag's answer did not verify: ${(err as Error).message}`);
    }
    const submission = device.tagSubmission();
    if (submission !== null) await proxy.call("POST", "/v1/submit", { body: submission, token });
    const broadcast = await proxy.call("GET", "/v1/broadcast");
    device.receiveBroadcast(broadcast);
    const envelopes = device.phase2(phase2Inputs(document, device.heard!.maxCount, device.count));
    await proxy.call("POST", "/v1/phase2", { body: phase2Batch(envelopes), token });
    // As fre-e2t join prints them: each request's step and body, its envelopes' recipients and sizes.
    const requests: [string, number, typeof device.sent][] = [
      ["phase1", device.sent[0].envelope.length, device.sent.slice(0, 1)],
      ...(submission !== null ? [["submit", submission.length, device.sent.slice(1, 2)] as [string, number, typeof device.sent]] : []),
      ["phase2", phase2Batch(envelopes).length, device.sent.slice(-2)],
    ];
    for (const [step, size, sent] of requests) {
      const inner = { phase1: "BlindRequest", submit: "TagSubmission", phase2: "ShareSubmission or CoverShare" }[step];
      const parts = sent.map((e) => `SealedEnvelope(${inner}) to ${e.recipient} (${e.envelope.length} B)`).join(", ");
      console.log(`  sent ${step.padEnd(7)} ${String(size).padStart(6)} B: ${parts}`);
    }
    if (process.argv.includes("--show-bucket")) {
      console.log(`  (for you only) bucket ${hex(device.bucket)} tag ${hex(device.tag!)} released count ${device.count}: sent ${device.count !== null ? "shares" : "cover messages"}`);
    }
    console.log("join (TypeScript): done");
    return 0;
  } catch (err) {
    if (err instanceof VerificationError) console.error(`join: verification failed, nothing more was sent: ${err.message}`);
    else if (err instanceof PeerError && ["RateLimitedError", "RefusalBudgetError", "UnauthorizedError"].includes(err.kind)) {
      console.error(`join: credential refused (already used in this round, or not valid for it): ${err.detail}`);
      return 4;
    } else if (err instanceof PeerError && err.kind === "ProtocolStateError" && err.detail.includes("the round is in")) {
      console.error(`join: the round is closed for this request: ${err.detail}`);
      return 3;
    } else {
      console.error(`join: error: ${(err as Error).message}`);
      return 2;
    }
    return 5;
  }
}

main().then((code) => process.exit(code));
