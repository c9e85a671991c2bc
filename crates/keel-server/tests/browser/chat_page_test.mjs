// The chat page in headless Chromium (Debian's package), driven with playwright-core
// (npm; it brings no browser of its own). Against `keel serve --config
// examples/keel.yaml` (the offline model):
//   1. sends a message and waits for the streamed answer;
//   2. asks for an `echo` and sees the tool call and its result;
//   3. sends a dozen long messages on the same thread and waits for the compacting
//      toast; the thread list and the checkpoint history are filled in;
// then, against `keel serve --config examples/keel-review.yaml` (human in the loop on
// `echo`), asks for an echo, sees the review box, approves, and sees the result, then
// edits the arguments of the next one;
// and saves screenshots under target/serve-tests/.
//
//   node chat_page_test.mjs URL SCREENSHOT_DIR [REVIEW_URL]
import { chromium } from "playwright-core";

const [url, shots, reviewUrl] = process.argv.slice(2);
const results = { passed: 0, failed: 0 };

async function step(name, fn) {
  try {
    await fn();
    results.passed += 1;
    console.log(`ok   ${name}`);
  } catch (err) {
    results.failed += 1;
    console.log(`FAIL ${name}\n${err.stack || err}`);
  }
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
const pageErrors = [];
page.on("pageerror", (e) => pageErrors.push(String(e)));

async function sendAndWait(text) {
  await page.fill("#input", text);
  await page.click("#send");
  await page.waitForFunction(() => document.body.dataset.busy === "false" && !document.querySelector("#send").disabled, null, { timeout: 60000 });
}

await step("the page loads and finds the assistant", async () => {
  await page.goto(url);
  await page.waitForFunction(() => document.querySelector("#assistant").textContent.includes("agent"), null, { timeout: 15000 });
});

await step("a message gets a streamed answer", async () => {
  await sendAndWait("Hi! I'm Ada, on project PRJ-123 on the EU cluster.");
  const answers = await page.$$eval(".msg.ai", (els) => els.map((e) => e.textContent));
  assert(answers.length === 1, `one answer expected, got ${JSON.stringify(answers)}`);
  assert(answers[0].includes("messages in my context"), `unexpected answer ${answers[0]}`);
  const threads = await page.$$eval("#threads li", (els) => els.length);
  assert(threads >= 1, "the new thread is listed");
});

await step("a tool call and its result are shown", async () => {
  await sendAndWait("Please echo the word banana");
  const calls = await page.$$eval(".tool-call", (els) => els.map((e) => e.textContent));
  assert(calls.some((c) => c.includes("echo(")), `tool call expected, got ${JSON.stringify(calls)}`);
  const tools = await page.$$eval(".msg.tool", (els) => els.map((e) => e.textContent));
  assert(tools.some((t) => t.startsWith("echo:") && t.includes("banana")), `tool result expected, got ${JSON.stringify(tools)}`);
});

await step("a long thread shows the compacting toast", async () => {
  const log = Array.from({ length: 10 }, (_, i) => `  10:0${i}:00 WARN ingest: object store timeout after 30s (bucket ingest-eu, partition ${i}, attempt ${i + 1})`).join("\n");
  let seen = false;
  for (let turn = 1; turn <= 12 && !seen; turn += 1) {
    await page.fill("#input", `Step ${turn}: the ingest job failed again on node ${turn}. Log excerpt:\n${log}\nWhat should I look at next?`);
    await page.click("#send");
    // The toast is up from the compacting event until shortly after the run ends.
    const toast = page.waitForSelector("#toast:not([hidden])", { timeout: 60000 }).then(() => true).catch(() => false);
    await page.waitForFunction(() => document.body.dataset.busy === "false", null, { timeout: 60000 });
    if (Number(await page.evaluate(() => document.body.dataset.toasts)) > 0) {
      seen = await toast;
      if (seen) {
        await page.screenshot({ path: `${shots}/chat-page-toast.png` });
        // The toast sits in the page's flow: it covers no message.
        const overlaps = await page.evaluate(() => {
          const t = document.getElementById("toast").getBoundingClientRect();
          const box = document.getElementById("messages").getBoundingClientRect();
          return [...document.querySelectorAll("#messages .msg")]
            .map((m) => m.getBoundingClientRect())
            .filter((r) => r.bottom > box.top && r.top < box.bottom) // visible part of the list
            .filter((r) => r.left < t.right && t.left < r.right && r.top < t.bottom && t.top < r.bottom).length;
        });
        assert(overlaps === 0, `the toast covers ${overlaps} message(s)`);
      }
    }
  }
  assert(seen, "no compacting toast in 12 long turns");
  const toastText = await page.textContent("#toast");
  assert(toastText.includes("Compacting"), `toast text ${toastText}`);
});

await step("the conversation keeps a marker where compaction happened", async () => {
  // After the run's last `values` event redrew the messages, and after the toast is gone.
  await page.waitForSelector("#toast", { state: "hidden", timeout: 10000 });
  const marks = await page.$$eval("#messages .compaction-marker", (els) => els.map((e) => e.textContent));
  assert(marks.length >= 1, "no compaction marker in the conversation");
  assert(/Context compacted at .+: \d+ earlier messages? summarized, \d+ recent messages? kept verbatim/.test(marks[0]), `marker text ${marks[0]}`);
  // It sits between messages, not after the last one only: something follows it.
  const followed = await page.$eval("#messages .compaction-marker", (e) => e.nextElementSibling !== null);
  assert(followed, "the marker is not in the conversation's flow");
  await page.screenshot({ path: `${shots}/chat-page-compaction-marker.png` });
});

await step("thread history is listed and reopening the thread shows every message", async () => {
  const history = await page.$$eval("#history li", (els) => els.map((e) => e.textContent));
  assert(history.length > 5 && history[0].startsWith("step "), `history ${JSON.stringify(history)}`);
  assert(!history.some((h) => h.includes("#-1") || /\b1 messages\b/.test(h)), `history wording ${JSON.stringify(history)}`);
  await page.click("#new-thread");
  await page.waitForFunction(() => document.querySelectorAll(".msg").length === 0);
  await page.click("#threads li:not(.active)");
  await page.waitForFunction(() => document.querySelectorAll(".msg.human").length >= 8, null, { timeout: 10000 });
  // Reopened from the server's state, the thread still shows where it was compacted.
  assert((await page.$$("#messages .compaction-marker")).length >= 1, "the marker is gone after reopening the thread");
  await page.screenshot({ path: `${shots}/chat-page.png`, fullPage: false });
});

await step("a paused run shows its review, and approving runs the tool", async () => {
  assert(reviewUrl, "no REVIEW_URL given");
  await page.goto(reviewUrl);
  await page.waitForFunction(() => document.querySelector("#assistant").textContent.includes("agent"), null, { timeout: 15000 });
  await page.click("#new-thread");
  await sendAndWait("Please echo the word apples");
  await page.waitForSelector("#review:not([hidden])", { timeout: 10000 });
  const call = await page.textContent("#review code");
  assert(call.startsWith("echo(") && call.includes("apples"), `review shows ${call}`);
  const before = await page.$$eval(".msg.tool", (els) => els.length);
  assert(before === 0, "the tool ran before the review");
  await page.screenshot({ path: `${shots}/chat-page-review.png` });
  await page.click("#review button.approve");
  await page.waitForFunction(() => document.querySelectorAll(".msg.tool").length === 1, null, { timeout: 30000 });
  await page.waitForFunction(() => document.body.dataset.busy === "false", null, { timeout: 30000 });
  const tools = await page.$$eval(".msg.tool", (els) => els.map((e) => e.textContent));
  assert(tools[0].startsWith("echo:") && tools[0].includes("apples"), `tool result ${JSON.stringify(tools)}`);
  assert(await page.isHidden("#review"), "the review box is still up");
});

await step("an edit in the review box runs the call with the new arguments", async () => {
  await sendAndWait("Please echo the word pears");
  await page.waitForSelector("#review:not([hidden])", { timeout: 10000 });
  await page.fill("#review .review-args", JSON.stringify({ query: "plums instead" }));
  await page.click("#review button.edit");
  await page.waitForFunction(() => document.querySelectorAll(".msg.tool").length === 2, null, { timeout: 30000 });
  await page.waitForFunction(() => document.body.dataset.busy === "false", null, { timeout: 30000 });
  const tools = await page.$$eval(".msg.tool", (els) => els.map((e) => e.textContent));
  assert(tools[1].includes("plums instead") && !tools[1].includes("pears"), `tool result ${JSON.stringify(tools)}`);
});

await step("no script error on the page", async () => {
  assert(pageErrors.length === 0, pageErrors.join("\n"));
});

await browser.close();
console.log(`${results.passed} passed, ${results.failed} failed`);
process.exit(results.failed ? 1 : 0);
