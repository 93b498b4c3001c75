// Plays users on the join page in headless Chromium (Debian's, driven by playwright-core): one
// browser, a fresh context and page per user, each given its credential, the CA (as a chosen
// file) and its embedding (the page's "use a given embedding" input) through the page's inputs.
// Reads a JSON job on stdin: {url, ca, users: [{credential, embedding, tamper?, screenshot?}],
// timeoutMs, stagger?}; with stagger, each page starts once the one before has sent its tag (so
// the pages' own work is timed one at a time); tamper "round" changes the served round document, "proof" S_tag's answer, on the
// way to the page (as someone on the path would). Writes one JSON result per user on stdout: the
// page's state and message, its step reports, what it says left the device, and every request
// the page made (method, path, body size).
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const job = JSON.parse(readFileSync(0, "utf8"));
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

function flipHex(text) {
  // One hex digit of the public seed changed: the document the servers signed is no longer the one served.
  return text.replace(/("public_seed":\s*")([0-9a-f])/, (_, head, c) => head + (c === "0" ? "1" : "0"));
}

async function tamper(page, how) {
  if (how === "round") {
    await page.route("**/v1/round", async (route) => {
      const response = await route.fetch();
      await route.fulfill({ response, body: flipHex(await response.text()) });
    });
  } else if (how === "proof") {
    await page.route("**/v1/phase1/*", async (route) => {
      const response = await route.fetch();
      const body = Buffer.from(await response.body());
      if (response.status() === 200 && body.length > 0) body[body.length - 1] ^= 0x01; // the proof's last byte
      await route.fulfill({ response, body });
    });
  }
}

// At most this many pages load at once (the bundle parsed, TLS to the proxy): dozens at once on a
// small machine outlast any navigation timeout. Loaded pages all stay open and play together.
let loadSlots = job.parallelLoads ?? 8;
const waiting = [];
async function loadSlot() {
  if (loadSlots > 0) loadSlots--;
  else await new Promise((resolve) => waiting.push(resolve));
  return () => (waiting.length > 0 ? waiting.shift()() : loadSlots++);
}

async function play(browser, user, submitted = () => {}) {
  const release = await loadSlot();
  const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1000, height: 1100 } });
  const page = await context.newPage();
  const requests = [];
  const problems = [];
  page.on("request", (r) => requests.push([r.method(), new URL(r.url()).pathname, (r.postDataBuffer() ?? Buffer.alloc(0)).length]));
  page.on("pageerror", (e) => problems.push(String(e)));
  // A refused or not-yet-ready request (425 while phase 1 is open) is logged by Chromium as a failed
  // load; the page handles those itself. Anything else on the console is a problem.
  page.on("console", (m) => { if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push(m.text()); });
  if (user.tamper) await tamper(page, user.tamper);
  try {
    await page.goto(job.url, { waitUntil: "load", timeout: job.timeoutMs ?? 120000 });
  } finally {
    release();
  }
  await page.fill("#credential", user.credential);
  await page.setInputFiles("#ca-file", job.ca);
  if (user.embedding !== undefined) {
    await page.click("#given summary");
    await page.fill("#embedding", JSON.stringify(user.embedding));
  }
  if (user.text !== undefined) await page.fill("#text", user.text);
  const t0 = Date.now();
  await page.click("#go");
  page.waitForSelector("#steps tr[data-step=submit].done, body[data-state=failed]", { timeout: job.timeoutMs ?? 120000 })
    .then(submitted, submitted);
  await page.waitForSelector("body[data-state=done], body[data-state=failed]", { timeout: job.timeoutMs ?? 120000 });
  const wall = Date.now() - t0;
  const result = await page.evaluate(() => ({
    state: document.body.dataset.state,
    status: document.getElementById("status").textContent,
    kind: document.getElementById("status").dataset.kind ?? null,
    steps: [...document.querySelectorAll("#steps tbody tr")].map((r) => (r.dataset.report ? JSON.parse(r.dataset.report) : { step: r.dataset.step, failed: true })),
    sent: [...document.querySelectorAll("#sent tbody tr")].map((r) => [...r.cells].map((c) => c.textContent)),
    stored: { localStorage: localStorage.length, sessionStorage: sessionStorage.length },
  }));
  if (user.screenshot) await page.screenshot({ path: user.screenshot, fullPage: true });
  await context.close();
  return { ...result, wall, requests, problems };
}

const browser = await chromium.launch({ executablePath: job.chromium ?? "/usr/bin/chromium", args: ARGS, headless: true });
try {
  const playing = [];
  for (const user of job.users) {
    let submitted = () => {};
    const tagSent = new Promise((resolve) => { submitted = resolve; });
    playing.push(play(browser, user, submitted).catch((e) => { submitted(); return { state: "driver-error", status: String(e) }; }));
    if (job.stagger) await tagSent;
  }
  const results = await Promise.all(playing);
  process.stdout.write(JSON.stringify(results) + "\n");
} finally {
  await browser.close();
}
