// @langchain/react's useStream (app.jsx, bundled with esbuild) in headless Chromium
// against the scripted server: three messages in one thread, every answer rendered,
// then a reload of the thread renders the same six messages. No request may get a 4xx
// or 5xx.
//
//   node react_v2_test.mjs URL DIR   (DIR holds app.js; CHROMIUM=path)
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const [api, dir] = process.argv.slice(2);
const html = `<!doctype html><meta charset="utf-8"><title>@langchain/react</title>
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
const page_url = `http://localhost:${server.address().port}/`;

let failures = 0;
const ok = (cond, what) => {
  console.log(`${cond ? "ok  " : "FAIL"} ${what}`);
  if (!cond) failures += 1;
};

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage();
  const bad = [];
  page.on("response", (r) => {
    if (r.url().startsWith(api) && r.status() >= 400) bad.push(`${r.request().method()} ${r.url()} ${r.status()}`);
  });
  page.on("pageerror", (e) => bad.push(`page error: ${e.message}`));
  const texts = () =>
    page.$$eval(".message", (ls) => ls.map((l) => [l.dataset.type, l.textContent]));
  const answered = (n) =>
    page.waitForFunction(
      (n) =>
        document.querySelectorAll(".message").length >= n &&
        document.getElementById("status").dataset.loading === "false",
      n,
      { timeout: 20000 },
    );
  await page.goto(`${page_url}?api=${encodeURIComponent(api)}`);
  const said = ["first message", "second message", "third message"];
  for (const [i, s] of said.entries()) {
    await page.fill("#input", s);
    await page.click("#send");
    try {
      await answered(2 * (i + 1));
    } catch (e) {
      ok(false, `answer ${i + 1} rendered (${JSON.stringify(await texts())}; ${bad.join("; ")})`);
      throw e;
    }
  }
  await page.waitForTimeout(300);
  const three = await texts();
  ok(three.length === 6, `three messages, three answers rendered ${JSON.stringify(three)}`);
  ok(
    said.every((s, i) => three[2 * i]?.[1] === s && three[2 * i + 1]?.[1].startsWith(`You said: ${s}`)),
    "each answer follows its message",
  );
  const threadId = await page.getAttribute("#status", "data-thread");
  ok(!!threadId, `the page learnt its thread id (${threadId})`);
  ok(bad.length === 0, `no error status while chatting ${JSON.stringify(bad)}`);

  const before = bad.length;
  await page.goto(`${page_url}?api=${encodeURIComponent(api)}&thread=${threadId}`);
  await page.waitForFunction(() => document.querySelectorAll(".message").length >= 6, null, { timeout: 20000 }).catch(() => {});
  const reloaded = await texts();
  ok(JSON.stringify(reloaded) === JSON.stringify(three), `reload: the thread renders as before (${reloaded.length} messages)`);
  ok(bad.length === before, `reload: no error status ${JSON.stringify(bad.slice(before))}`);
  await page.screenshot({ path: path.join(dir, "react-v2.png"), fullPage: true });
} finally {
  await browser.close();
  server.close();
}
if (failures) {
  console.log(`react-v2: ${failures} failed`);
  process.exit(1);
}
console.log("react-v2: all passed");
