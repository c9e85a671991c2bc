"""An MCP server whose tool list grows while it runs, for keel-mcp's list-changed test.

Built on the official Python SDK (the `mcp` package, 2.x, from PyPI). It starts with one
tool, `add_tool`; calling it with a name registers a tool of that name and sends
`notifications/tools/list_changed`, as the MCP specification's tools section describes
for a server declaring `tools.listChanged`. Run over stdio:

    python list_changed_server.py
"""

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("keel-list-changed")


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool called `name` and tells the client the list changed."""

    def added() -> str:
        return f"{name} tool called"

    server.add_tool(added, name=name, description=f"The tool {name}, added at run time.")
    await ctx.request_context.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run("stdio")
