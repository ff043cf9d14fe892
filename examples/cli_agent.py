"""A minimal agent CLI: plain Python, GTA's tools over MCP, the model's own function calls.

    pytest --gta-data=sample --gta-mode=e2e --gta-tools=local --gta-model=openai/gpt-4o \
        --gta-agent-command='python examples/cli_agent.py {mcp_url} {query_file}
            {model_url} {model}'

What a team's own agent CLI does, in a few lines: read the task, list the case's tools, let the
model call them until it answers, print the answer (stdout is what is scored).
"""

import asyncio
import json
import sys
from pathlib import Path

from mcp import Client
from openai import AsyncOpenAI


def function(tool):
    """An MCP tool as an OpenAI function tool."""
    spec = {"name": tool.name, "description": tool.description or ""}
    return {"type": "function", "function": {**spec, "parameters": tool.input_schema}}


async def main(mcp_url: str, query_file: str, model_url: str, model: str) -> str:
    """Answer the query of ``query_file`` with the case's tools and model."""
    task = json.loads(Path(query_file).read_text())
    prompt = f"{task['query']}\n\nInput images: {', '.join(task['images']) or 'none'}"
    messages = [{"role": "user", "content": prompt}]
    async with AsyncOpenAI(base_url=model_url, api_key="unused") as llm, Client(mcp_url) as mcp:
        tools = [function(t) for t in (await mcp.list_tools()).tools]
        for _ in range(20):
            reply = await llm.chat.completions.create(model=model, messages=messages, tools=tools)
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                arguments = json.loads(call.function.arguments)
                result = await mcp.call_tool(call.function.name, arguments)
                text = "\n".join(c.text for c in result.content if c.type == "text")
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return ""


if __name__ == "__main__":
    print(asyncio.run(main(*sys.argv[1:5])))
