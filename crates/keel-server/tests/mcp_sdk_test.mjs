// `keel serve`'s /mcp endpoint with the official TypeScript SDK's client
// (@modelcontextprotocol/sdk, from npm), as scripts/mcp-tests.sh runs it:
//
//   node mcp_sdk_test.mjs http://127.0.0.1:PORT API_KEY
//
// The server serves examples/keel-mcp.yaml (the offline model, whose tools come from
// MCP servers): the assistant is listed as a tool, a call that names the everything
// server's echo tool makes the agent call it, and the answer comes back as the tool's
// result; a wrong key is refused.
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key] = process.argv.slice(2);
if (!url || !key) {
  console.error("usage: node mcp_sdk_test.mjs BASE_URL API_KEY");
  process.exit(2);
}

function connect(token) {
  const client = new Client({ name: "keel-sdk-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  return client.connect(transport).then(() => client);
}

const client = await connect(key);
const { tools } = await client.listTools();
assert.deepEqual(tools.map((t) => t.name), ["agent"]);
assert.deepEqual(tools[0].inputSchema.required, ["message"]);

// The offline model calls the tool the message names, with the message as its
// required string argument: the everything server's echo answers, through the stack.
const result = await client.callTool({
  name: "agent",
  arguments: { message: "please everything_echo this line", thread_id: "sdk-thread" },
});
assert.equal(result.isError, false, JSON.stringify(result));
const text = result.content.map((c) => c.text).join("");
assert.match(text, /everything_echo returned: Echo: please everything_echo this line/);
assert.equal(result.structuredContent.thread_id, "sdk-thread");

// The same thread continues: the next answer sees the earlier turn's messages.
const again = await client.callTool({
  name: "agent",
  arguments: { message: "which line did you echo?", thread_id: "sdk-thread" },
});
assert.match(again.content[0].text, /messages in my context/);
await client.close();

await assert.rejects(connect("not-a-valid-key"), /401|Unauthorized|invalid API key/i);
console.log("1 passed, 0 failed");
