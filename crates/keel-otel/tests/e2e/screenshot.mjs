// The Keel trace in Arize Phoenix's UI, in headless Chromium (playwright-core).
// Usage: node screenshot.mjs PHOENIX_URL PROJECT OUT.png
import { chromium } from "playwright-core";

const [base, projectName, out] = process.argv.slice(2);

const projects = (await (await fetch(`${base}/v1/projects`)).json()).data;
const project = projects.find((p) => p.name === projectName);
if (!project) throw new Error(`no project ${projectName} in ${JSON.stringify(projects)}`);
const spans = (await (await fetch(`${base}/v1/projects/${projectName}/spans?limit=100`)).json()).data;
const root = spans.find((s) => s.parent_id === null);
if (!root) throw new Error("no root span");
// The compaction that wrote a summary: the span the screenshot opens, with its
// attributes beside the tree.
const compaction =
  spans.find((s) => s.attributes["keel.compaction.action"] === "compacted") ?? root;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
const url = `${base}/projects/${project.id}/traces/${root.context.trace_id}?selectedSpanNodeId=${encodeURIComponent(compaction.id)}`;
await page.goto(url, { waitUntil: "networkidle" });
await page.getByText("invoke_agent keel").first().waitFor({ timeout: 30000 });
await page.getByText("execute_tool echo").first().waitFor({ timeout: 30000 });
await page.getByRole("tab", { name: "Attributes" }).first().click();
await page.getByText("keel.compaction.tokens_before").first().waitFor({ timeout: 30000 });
await page.waitForTimeout(1000);
await page.screenshot({ path: out });
await browser.close();
console.log(`screenshot of ${url}: ${out}`);
