"""openai-agents: an Agent with one function tool, run with Runner.run and
Runner.run_streamed through the route, on the Responses API model."""

import asyncio
import os

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from common import CONTINUED, MEMO, MODEL, TOOL_RESULT, WEATHER, check, mock_requests, ok

set_tracing_disabled(True)
CALLS = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    CALLS.append(city)
    return TOOL_RESULT


async def main():
    api = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
    agent = Agent(
        name="weather",
        instructions="Use the tools to answer.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=MODEL, openai_client=api),
    )
    result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
    check(CALLS == ["Paris"], "the tool ran once, for Paris", CALLS)
    check(result.final_output == WEATHER, "the final output", result.final_output)
    msgs = mock_requests()[-1]["body"]["messages"]
    check(msgs[-1]["role"] == "tool" and msgs[-1]["content"] == TOOL_RESULT, "the tool's output reached the model", msgs)
    ok("Runner.run")

    CALLS.clear()
    run = Runner.run_streamed(agent, "What is the weather in Paris?", max_turns=4)
    kinds = [e.type async for e in run.stream_events()]
    check(CALLS == ["Paris"], "streamed: the tool ran once", CALLS)
    check(run.final_output == WEATHER, "streamed: the final output", run.final_output)
    check("raw_response_event" in kinds, "streamed: raw events came through", kinds[:20])
    ok("Runner.run_streamed")

    # Server-side state: the second run continues the first by its
    # response id instead of sending the history.
    first = await Runner.run(agent, "Remember: the secret word is AZURE.")
    check(first.final_output == MEMO, "stateful: first run", first.final_output)
    check(bool(first.last_response_id), "stateful: a response id", first.last_response_id)
    second = await Runner.run(agent, "What was the secret word?", previous_response_id=first.last_response_id)
    check(second.final_output == CONTINUED, "stateful: the second run saw the first", second.final_output)
    ok("Runner.run previous_response_id")
    await api.close()


asyncio.run(main())
