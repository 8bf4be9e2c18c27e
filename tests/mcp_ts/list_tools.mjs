// Lists a running tapgate's MCP tools with the official MCP TypeScript SDK client, as a TypeScript
// assistant sees them, and prints them as one JSON object on stdout.
//
//   TAPGATE_AGENT_TOKEN=... node list_tools.mjs http://127.0.0.1:8080/mcp
//
// The agent's token comes from the environment, never the command line, where any process could read it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url] = process.argv.slice(2);
const token = process.env.TAPGATE_AGENT_TOKEN;
if (!url || !token) {
  process.stderr.write("usage: TAPGATE_AGENT_TOKEN=<agent token> node list_tools.mjs <gateway URL>/mcp\n");
  process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "tapgate-test-ts", version: "1.0.0" });
await client.connect(transport);
try {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  const listed = { protocolVersion: transport.protocolVersion, tools };
  process.stdout.write(`${JSON.stringify(listed)}\n`);
} finally {
  await client.close();
}
