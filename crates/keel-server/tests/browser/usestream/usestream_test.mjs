// The useStream page (app.jsx, bundled with esbuild) in headless Chromium against the
// scripted server: three messages in one thread, regenerate, edit of the first message,
// an approved interrupt (on the review server), then a reload that finds the thread by
// graph_id through threads.search. Every answer must render and no request may get a
// 4xx, except where noted below.
//
//   node usestream_test.mjs PLAIN_URL REVIEW_URL DIR   (DIR holds app.js; CHROMIUM=path)
//
// Regenerate and edit run from an earlier checkpoint: the server forks the thread there,
// and the model is sent only the new branch (the answer counts the messages it got).
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const [plain, review, dir] = process.argv.slice(2);

const html = `<!doctype html><meta charset="utf-8"><title>useStream</title>
<div id="root"></div><script type="module" src="/app.js"></script>`;
const server = http.createServer((req, res) => {
  if (req.url.startsWith("/app.js")) {
    res.writeHead(200, { "content-type": "text/javascript" });
    res.end(fs.readFileSync(path.join(dir, "app.js")));
  } else {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(html);
  }
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const origin = `http://127.0.0.1:${server.address().port}`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
let failures = 0;
const ok = (cond, what) => {
  console.log(`${cond ? "ok  " : "FAIL"} ${what}`);
  if (!cond) failures++;
};

function watch(page) {
  const bad = [];
  page.on("response", (r) => {
    if (r.status() >= 400 && r.status() < 500) bad.push(`${r.status()} ${r.request().method()} ${r.url()}`);
  });
  page.on("pageerror", (e) => bad.push(`page error: ${e.message}`));
  return bad;
}

async function texts(page) {
  return page.$$eval("#messages .msg", (els) =>
    els.map((e) => [e.dataset.type, e.querySelector(".text").textContent]),
  );
}

async function idle(page) {
  await page.waitForSelector('#status[data-loading="false"]', { timeout: 30000 });
}

async function say(page, content, expected) {
  await page.fill("#input", content);
  await page.click("#send");
  await page.waitForFunction(
    (want) => [...document.querySelectorAll("#messages .msg .text")].some((e) => e.textContent === want),
    expected,
    { timeout: 30000 },
  );
  await idle(page);
}

try {
  // --- three messages, regenerate, edit ---
  const page = await browser.newPage();
  const bad = watch(page);
  await page.goto(`${origin}/?api=${encodeURIComponent(plain)}`);
  await idle(page);
  await say(page, "first message", "You said: first message (1 messages)");
  await say(page, "second message", "You said: second message (3 messages)");
  await say(page, "third message", "You said: third message (5 messages)");
  const three = await texts(page);
  ok(three.length === 6, `three messages, three answers rendered (${three.length} messages)`);
  const threadId = await page.getAttribute("#status", "data-thread");
  ok(!!threadId, `the page learnt its thread id (${threadId})`);
  ok(bad.length === 0, `no 4xx while chatting ${JSON.stringify(bad)}`);

  // Regenerate the last answer: a run without input from its parent checkpoint.
  const before = bad.length;
  await page.locator(".regenerate").last().click();
  await page.waitForTimeout(300);
  await idle(page);
  const regenerated = await texts(page);
  ok(bad.length === before, `regenerate: no 4xx ${JSON.stringify(bad.slice(before))}`);
  ok(JSON.stringify(regenerated) === JSON.stringify(three), "regenerate: the same six messages, the last answered again");

  // Edit the first message: a run with the new text from the first message's parent checkpoint.
  const beforeEdit = bad.length;
  await page.locator(".edit").first().click();
  await page.fill("#input", "edited first");
  await page.click("#send");
  await page.waitForTimeout(300);
  await idle(page);
  const edited = await texts(page);
  ok(bad.length === beforeEdit, `edit: no 4xx ${JSON.stringify(bad.slice(beforeEdit))}`);
  ok(
    JSON.stringify(edited) === JSON.stringify([["human", "edited first"], ["ai", "You said: edited first (1 messages)"]]),
    `edit: the thread restarts from the edited message ${JSON.stringify(edited)}`,
  );
  await page.screenshot({ path: path.join(dir, "usestream.png"), fullPage: true });

  // --- an interrupt, approved ---
  const rpage = await browser.newPage();
  const rbad = watch(rpage);
  await rpage.goto(`${origin}/?api=${encodeURIComponent(review)}`);
  await idle(rpage);
  await rpage.fill("#input", "echo hello");
  await rpage.click("#send");
  await rpage.waitForSelector("#interrupt", { timeout: 30000 });
  await idle(rpage);
  const asked = await rpage.textContent("#interrupt");
  ok(asked.includes("action_requests") && asked.includes("echo"), "interrupt: the HITL request is rendered");
  await rpage.click("#approve");
  await rpage.waitForFunction(
    () => [...document.querySelectorAll("#messages .msg .text")].some((e) => e.textContent.startsWith("The tool said:")),
    null,
    { timeout: 30000 },
  );
  await idle(rpage);
  ok((await rpage.$("#interrupt")) === null, "interrupt: gone once approved, the tool's answer rendered");
  ok(rbad.length === 0, `interrupt: no 4xx ${JSON.stringify(rbad)}`);

  // --- reload, find the thread by graph_id, open it ---
  const lpage = await browser.newPage();
  const lbad = watch(lpage);
  await lpage.goto(`${origin}/?pick=1&api=${encodeURIComponent(plain)}`);
  await lpage.waitForSelector(`[data-thread="${threadId}"]`, { timeout: 30000 });
  ok(true, "reload: threads.search by graph_id lists the thread");
  await lpage.click(`[data-thread="${threadId}"]`);
  await lpage.waitForFunction(() => document.querySelectorAll("#messages .msg").length > 0, null, { timeout: 30000 });
  await idle(lpage);
  const reloaded = await texts(lpage);
  ok(JSON.stringify(reloaded) === JSON.stringify(edited), `reload: the thread renders as before (${reloaded.length} messages)`);
  ok(lbad.length === 0, `reload: no 4xx ${JSON.stringify(lbad)}`);
} catch (e) {
  console.log(`FAIL ${e.stack}`);
  failures++;
} finally {
  await browser.close();
  server.close();
}
console.log(failures ? `usestream: ${failures} failed` : "usestream: all passed");
process.exit(failures ? 1 : 0);
