"""An OpenAI Agents SDK agent under test: GTA's tools over MCP, its model through the proxy.

    pytest --gta-data=sample --gta-mode=e2e --gta-tools=local --gta-model=openai/gpt-4o \
        --gta-agent=examples/openai_agents_agent.py:agent

pip install "pytest-gta[examples]" (openai-agents). The SDK's Runner runs the loop; the tools
come from the case's MCP endpoint and the model requests go to ``task.model_url``, where the
harness records them.
"""

import contextlib

from agents import Agent, OpenAIResponsesModel, RunConfig, Runner
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI

# openai-agents imports httpx on its first MCP server; an OpenAI client made meanwhile by another
# case running at once would find it half-imported. Import it before the cases start.
with contextlib.suppress(ImportError):
    import httpx  # noqa: F401

INSTRUCTIONS = "Answer the user's question. Use the tools; pass files by their absolute path."


async def agent(task):
    """Run one GTA query; the final output is the answer that is scored."""
    prompt = f"{task.text}\n\nInput images: {', '.join(task.image_paths) or 'none'}"
    async with (
        AsyncOpenAI(base_url=task.model_url, api_key="unused") as client,
        MCPServerStreamableHttp(params={"url": task.mcp_url}) as tools,
    ):
        gta = Agent(
            name="gta",
            instructions=INSTRUCTIONS,
            model=OpenAIResponsesModel(task.model, client),
            mcp_servers=[tools],
        )
        # No traces to OpenAI's servers: the harness records the run itself.
        result = await Runner.run(gta, prompt, run_config=RunConfig(tracing_disabled=True))
    return result.final_output
