"""A smolagents agent under test, as a command in a virtualenv of its own.

smolagents' MCP tools (mcpadapt 0.1.19) need mcp<2 (the harness uses mcp 2), so it runs beside
the harness:

    python3 -m venv .venv-smolagents
    .venv-smolagents/bin/pip install "smolagents[mcp,openai]" "mcp<2"
    pytest --gta-data=sample --gta-mode=e2e --gta-tools=local --gta-model=openai/gpt-4o \
        --gta-agent-command='.venv-smolagents/bin/python examples/smolagents_agent.py
            {mcp_url} {query_file} {model_url} {model}'

A ToolCallingAgent runs the loop over the case's MCP tools and ends it through its
``final_answer`` tool; stdout is the answer scored.
"""

import json
import sys
from pathlib import Path

from smolagents import MCPClient, OpenAIServerModel, ToolCallingAgent


def main(mcp_url: str, query_file: str, model_url: str, model: str) -> str:
    """Answer the query of ``query_file`` with the case's tools and model."""
    task = json.loads(Path(query_file).read_text())
    prompt = f"{task['query']}\n\nInput images: {', '.join(task['images']) or 'none'}"
    llm = OpenAIServerModel(model_id=model, api_base=model_url, api_key="unused")
    server = {"url": mcp_url, "transport": "streamable-http"}
    with MCPClient(server, structured_output=False) as tools:
        # mcpadapt drops the schema's "required" list, making every input mandatory
        # (grll/mcpadapt#90): let optional ones be left out; GTA's server checks the arguments.
        for spec in (s for tool in tools for s in tool.inputs.values()):
            spec["nullable"] = True
        agent = ToolCallingAgent(tools=tools, model=llm, max_steps=20, verbosity_level=0)
        return str(agent.run(prompt))


if __name__ == "__main__":
    print(main(*sys.argv[1:5]))
