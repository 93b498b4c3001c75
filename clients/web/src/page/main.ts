/**
 * The page a person joins a round from: the steps are flow.ts's (the node client plays the same),
 * over fetch to the proxy that served the page, the round document checked against the CA the
 * person chose. Nothing is stored: no storage API is used, and the text, embedding, bucket and tag
 * live in this function's variables until the page is closed.
 */
import { deviceEmbedding } from "../embedder.js";
import { FetchTransport, verifyRoundWeb } from "../browser_net.js";
import { INNER, type StepName, type StepReport, playDevice, refusal } from "../flow.js";
import { embedText } from "./text.js";

const $ = <T extends HTMLElement>(id: string): T => {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`the page has no #${id}`);
  return el as T;
};

const LABELS: Record<StepName, string> = {
  round: "round document fetched, signatures checked",
  embedding: "embedding",
  blind: "blind request sealed and sent",
  evaluation: "S_tag's proof checked, tag finalized",
  submit: "tag submission sealed and sent",
  broadcast: "broadcast heard",
  phase2: "phase 2 encoded, shared, sealed and sent",
};

const FAILED: Record<string, string> = {
  verification: "Verification failed; nothing more was sent: ",
  credential: "Your credential was refused (already used in this round, or not valid for it); nothing more was sent: ",
  closed: "The round is closed for this request; nothing more was sent: ",
  error: "Stopped; nothing more was sent: ",
};

/**
 * Whether the phase-2 pair was shares or cover is what the wire hides (both are the same sizes),
 * so the page shows it only when the person asks, as ``join --show-bucket`` does.
 */
const onScreen = (r: StepReport): string =>
  r.step === "phase2" && !$<HTMLInputElement>("show-outcome").checked ? "" : r.note;

function cell(row: HTMLTableRowElement, text: string, numeric = false): void {
  const td = row.insertCell();
  td.textContent = text;
  if (numeric) td.className = "num";
}

const readFile = (input: HTMLInputElement): Promise<string | null> =>
  input.files && input.files.length > 0 ? input.files[0].text() : Promise.resolve(null);

/** What the person gave, read before any request (a missing one is said before anything is sent). */
async function inputs(): Promise<{ token: string; ca: string; given: string; text: string }> {
  const token = $<HTMLInputElement>("credential").value.trim();
  const ca = ((await readFile($<HTMLInputElement>("ca-file"))) ?? $<HTMLTextAreaElement>("ca").value).trim();
  const given = ((await readFile($<HTMLInputElement>("embedding-file"))) ?? $<HTMLTextAreaElement>("embedding").value).trim();
  const text = $<HTMLTextAreaElement>("text").value.trim();
  if (token === "") throw new Error("give your credential");
  if (ca === "") throw new Error("choose the deployment's CA certificate (a file or pasted PEM)");
  if (given === "" && text === "") throw new Error("write your text (or give an embedding)");
  return { token, ca, given, text };
}

async function join(): Promise<void> {
  const status = $("status"), steps = $<HTMLTableElement>("steps").tBodies[0], sent = $<HTMLTableElement>("sent").tBodies[0];
  steps.replaceChildren();
  sent.replaceChildren();
  status.className = "";
  document.body.dataset.state = "running";
  const rows = new Map<StepName, HTMLTableRowElement>();
  try {
    const { token, ca, given, text } = await inputs();
    status.textContent = "Joining…";
    const outcome = await playDevice({
      transport: new FetchTransport(),
      token,
      verifyRound: (raw) => verifyRoundWeb(raw, ca),
      embedding: async (round) => (given !== "" ? deviceEmbedding(round, JSON.parse(given)) : embedText(round, text)),
      starting: (step) => {
        const row = steps.insertRow();
        row.className = "running";
        row.dataset.step = step;
        cell(row, LABELS[step]);
        cell(row, "…");
        rows.set(step, row);
      },
      progress: (r: StepReport) => {
        const row = rows.get(r.step)!;
        row.className = "done";
        row.replaceChildren();
        cell(row, LABELS[r.step]);
        cell(row, "✓");
        cell(row, r.computeMs.toFixed(1), true);
        cell(row, r.networkMs.toFixed(1), true);
        cell(row, String(r.sentBytes), true);
        cell(row, String(r.receivedBytes), true);
        cell(row, onScreen(r));
        row.dataset.report = JSON.stringify(r);
      },
    });
    for (const { step, size, sent: envelopes } of outcome.requests) {
      const row = sent.insertRow();
      cell(row, step);
      cell(row, String(size), true);
      cell(row, envelopes.map((e) => `SealedEnvelope(${INNER[step]}) to ${e.recipient} (${e.envelope.length} B)`).join(", "));
    }
    status.textContent = `Done: your part of round '${(outcome.document as { round_id?: string }).round_id}' is in.`;
    status.className = "ok";
    document.body.dataset.state = "done";
  } catch (err) {
    const { kind, detail } = refusal(err);
    for (const row of rows.values()) if (row.className === "running") row.className = "failed";
    status.textContent = FAILED[kind] + detail;
    status.className = "failed";
    status.dataset.kind = kind;
    document.body.dataset.state = "failed";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const form = $<HTMLFormElement>("join"), button = $<HTMLButtonElement>("go");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    button.disabled = true;
    join().finally(() => {
      button.disabled = false;
    });
  });
});
