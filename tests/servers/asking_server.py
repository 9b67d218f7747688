"""A downstream that talks back: it asks its client for sampling, elicitation and roots, sends
log messages and progress, and grows its own tool list.

Tools: `ask_model(prompt)` -> the sampled text and model; `ask_user(question)` -> the
elicitation's action and answer; `roots()` -> the client's root URIs; `chatty(count)` sends
`count` warning log messages (logger "asker", data {"i": i}); `slow(steps)` reports progress
i/steps with message "step i"; `grow(name)` adds a tool `name` (returning "I am <name>") and
sends `notifications/tools/list_changed`; `level()` -> the last level set by logging/setLevel.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
from pydantic import BaseModel

# The one difference between SDK lines: mcp 2.x renamed FastMCP to MCPServer.
try:
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as MCPServer
except ModuleNotFoundError:
    from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("asker")
levels: list[str] = []


class Answer(BaseModel):
    answer: str


@mcp.tool()
async def ask_model(prompt: str, ctx: Context) -> dict[str, Any]:
    message = types.SamplingMessage(
        role="user", content=types.TextContent(type="text", text=prompt)
    )
    result = await ctx.session.create_message([message], max_tokens=32)
    content = result.content
    text = content.text if isinstance(content, types.TextContent) else repr(content)
    return {"text": text, "model": result.model}


@mcp.tool()
async def ask_user(question: str, ctx: Context) -> dict[str, Any]:
    result = await ctx.elicit(question, Answer)
    data = result.data.answer if result.action == "accept" else None
    return {"action": result.action, "answer": data}


@mcp.tool()
async def roots(ctx: Context) -> dict[str, Any]:
    listed = await ctx.session.list_roots()
    return {"roots": [str(root.uri) for root in listed.roots]}


@mcp.tool()
async def chatty(count: int, ctx: Context) -> str:
    for i in range(count):
        await ctx.session.send_log_message(level="warning", data={"i": i}, logger="asker")
    return f"sent {count}"


@mcp.tool()
async def slow(steps: int, ctx: Context) -> str:
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
    return f"did {steps} steps"


@mcp.tool()
async def grow(name: str, ctx: Context) -> str:
    def grown() -> str:
        return f"I am {name}"

    mcp.add_tool(grown, name=name, description=f"Added by grow({name!r}).")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@mcp.tool()
async def level() -> str:
    return levels[-1] if levels else "none"


def _record_levels() -> None:
    """Keep the levels logging/setLevel sets, so a test can see the forwarded request."""
    server = mcp._lowlevel_server if hasattr(mcp, "_lowlevel_server") else mcp._mcp_server

    async def record(level: str) -> None:
        levels.append(level)

    if hasattr(server, "set_logging_level"):  # 1.x: a decorator
        server.set_logging_level()(record)
        return

    async def on_set_level(ctx: Any, params: Any) -> types.EmptyResult:
        await record(params.level)
        return types.EmptyResult()

    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)


if __name__ == "__main__":
    _record_levels()
    mcp.run()
