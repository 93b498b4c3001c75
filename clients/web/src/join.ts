/**
 * ``node dist/src/join.js --round URL --ca ca.pem --credential FILE --embedding X.json``: one
 * device in a running round, as ``fre-e2t join`` plays it, from this client (the embedding is
 * given: a JSON list of the round's dimension, or ``{"embedder": NAME, "embedding": [...]}``
 * naming the model that made it). It prints the embedder the round names, and refuses an
 * embedding that declares another model (or, for a model of unit-norm rows, is not unit norm)
 * before anything is sent. Exit 0 done; 3 round closed; 4 credential refused; 5 a signature or
 * proof did not verify; 2 anything else (one line on stderr). The steps are flow.ts's, which the
 * browser page plays too: this driver moves the messages over node's HTTPS.
 */
import { readFileSync } from "node:fs";
import { hex } from "./bytes.js";
import { deviceEmbedding } from "./embedder.js";
import { INNER, playDevice, refusal } from "./flow.js";
import { Proxy, verifyRound } from "./net.js";

function option(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

const REFUSED: Record<string, string> = {
  verification: "join: verification failed, nothing more was sent: ",
  credential: "join: credential refused (already used in this round, or not valid for it): ",
  closed: "join: the round is closed for this request: ",
  error: "join: error: ",
};

async function main(): Promise<number> {
  const url = option("--round"), caFile = option("--ca"), credFile = option("--credential"), embFile = option("--embedding");
  if (!url || !caFile || !credFile || !embFile) {
    console.error("usage: join --round URL --ca ca.pem --credential FILE --embedding X.json [--show-bucket] [--deadline S]");
    return 2;
  }
  const ca = readFileSync(caFile, "utf8");
  const proxy = new Proxy(url, ca, Number(option("--deadline") ?? 900));
  const token = readFileSync(credFile, "utf8").trim();
  try {
    const { device, requests } = await playDevice({
      transport: proxy,
      token,
      verifyRound: async (raw) => verifyRound(raw, ca),
      embedding: async (document) => deviceEmbedding(document, JSON.parse(readFileSync(embFile, "utf8"))),
      progress: (report) => {
        if (report.step === "round") console.log(`join (TypeScript): ${report.note}`);
        if (report.step === "embedding") console.log(`  ${report.note}`);
      },
    });
    // As fre-e2t join prints them: each request's step and body, its envelopes' recipients and sizes.
    for (const { step, size, sent } of requests) {
      const parts = sent.map((e) => `SealedEnvelope(${INNER[step]}) to ${e.recipient} (${e.envelope.length} B)`).join(", ");
      console.log(`  sent ${step.padEnd(7)} ${String(size).padStart(6)} B: ${parts}`);
    }
    if (process.argv.includes("--show-bucket")) {
      console.log(`  (for you only) bucket ${hex(device.bucket)} tag ${hex(device.tag!)} released count ${device.count}: sent ${device.count !== null ? "shares" : "cover messages"}`);
    }
    console.log("join (TypeScript): done");
    return 0;
  } catch (err) {
    const { kind, status, detail } = refusal(err);
    console.error(REFUSED[kind] + detail);
    return status;
  }
}

main().then((code) => process.exit(code));
