"""A LangGraph agent under test, as a command in a virtualenv of its own.

langchain-mcp-adapters needs mcp<2 (the harness uses mcp 2), so it runs beside the harness:

    python3 -m venv .venv-langgraph
    .venv-langgraph/bin/pip install langgraph langchain-mcp-adapters langchain-openai "mcp<2"
    pytest --gta-data=sample --gta-mode=e2e --gta-tools=local --gta-model=openai/gpt-4o \
        --gta-agent-command='.venv-langgraph/bin/python examples/langgraph_agent.py
            {mcp_url} {query_file} {model_url} {model}'

``create_react_agent`` runs the loop over the case's MCP tools; stdout is the answer scored.
"""

import asyncio
import json
import sys
from pathlib import Path

from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent


async def main(mcp_url: str, query_file: str, model_url: str, model: str) -> str:
    """Answer the query of ``query_file`` with the case's tools and model."""
    task = json.loads(Path(query_file).read_text())
    prompt = f"{task['query']}\n\nInput images: {', '.join(task['images']) or 'none'}"
    client = MultiServerMCPClient({"gta": {"url": mcp_url, "transport": "streamable_http"}})
    llm = ChatOpenAI(model=model, base_url=model_url, api_key="unused")
    graph = create_react_agent(llm, await client.get_tools())
    state = await graph.ainvoke({"messages": [("user", prompt)]}, {"recursion_limit": 40})
    return str(state["messages"][-1].content)


if __name__ == "__main__":
    print(asyncio.run(main(*sys.argv[1:5])))
