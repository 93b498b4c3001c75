/**
 * The device's errors, the same in node and in a browser: a peer's final refusal (its status,
 * error kind and detail, as the services write them in fre_protocol/drivers/net/wire.py) and a
 * check of the device's own that failed (a signature, S_tag's proof).
 */
export class PeerError extends Error {
  constructor(readonly status: number, readonly kind: string, readonly detail: string) {
    super(`${kind} (${status}): ${detail}`);
  }
}

export class VerificationError extends Error {}

/** A final answer's error kind and detail from its body (JSON when short enough, else its text). */
export function peerError(status: number, body: Uint8Array): PeerError {
  let kind = "HTTPError", detail = new TextDecoder().decode(body.subarray(0, 200));
  try {
    const data = JSON.parse(detail.length < 200 ? new TextDecoder().decode(body) : "{}");
    kind = String(data.error);
    detail = String(data.detail);
  } catch { /* not JSON: keep the text */ }
  return new PeerError(status, kind, detail);
}

/** The pause before retry ``attempt`` (exponential from 20 ms, capped at 1 s, jittered). */
export const retryPause = (attempt: number): number => Math.min(1000, 20 * 2 ** attempt) * (0.5 + Math.random() / 2);

/** Whether an HTTP status is final: below 400, or a 4xx other than 425 (425 and 5xx are retried). */
export const isFinal = (status: number): boolean => status < 400 || (status !== 425 && status < 500);
