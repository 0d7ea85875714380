"""A real MCP server for Railyard's end-to-end tests: the `mcp` package's MCPServer
(FastMCP before mcp 2) over stdio or streamable HTTP, with tools the tests' mock model calls as
mcp__NAME__TOOL. It reads the token its definition passes as $MCP_TEST_TOKEN and
prints it to stderr, so the tests can check that it reaches the server and nowhere
else (the worker log, history, the checkpoint)."""

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("railyard-test")
TOKEN = os.environ.get("TEST_TOKEN", "")
print(f"test server starting with token {TOKEN}", file=sys.stderr, flush=True)


@server.tool()
def echo(text: str) -> str:
    """Echo the text back, with the server's process id."""
    return f"echo: {text} (pid {os.getpid()})"


@server.tool()
def token_info() -> str:
    """Say how long the token is, and the token itself (which the worker redacts)."""
    return f"token of {len(TOKEN)} bytes: {TOKEN}"


@server.tool()
def big(n: int) -> str:
    """Return n bytes of text."""
    return "y" * n


@server.tool()
async def hang() -> str:
    """Never answer."""
    await asyncio.sleep(3600)
    return "unreachable"


if __name__ == "__main__":
    # `--http PORT`: streamable HTTP on 127.0.0.1:PORT/mcp; else stdio.
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
