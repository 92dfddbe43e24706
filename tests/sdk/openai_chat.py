"""The openai SDK's Chat Completions through a route whose members are
Anthropic upstreams: whole, streamed with usage, and a tool round trip."""

import json

from openai import OpenAI

from anth_common import *  # noqa: F403

c = OpenAI(api_key=KEY, base_url=os.environ["OPENAI_BASE_URL"], max_retries=0, timeout=30)
ASK = [{"role": "user", "content": "What is the capital of France?"}]
TOOL = {"type": "function", "function": {"name": WEATHER_TOOL["name"], "description": WEATHER_TOOL["description"], "parameters": WEATHER_TOOL["input_schema"]}}

clear_mocks()
r = c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=256)
check(r.object == "chat.completion", "whole: object chat.completion", r.object)
check(r.choices[0].message.content == CAPITAL, "whole: the mock's answer", r.model_dump_json())
check(r.choices[0].finish_reason == "stop", "whole: finish_reason stop", r.choices[0].finish_reason)
check(r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, "whole: usage", r.usage)
check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "whole: total = prompt + completion", r.usage)
sent = [b for api, b in asked_anywhere()]
check(all(api == "anthropic" for api, _ in asked_anywhere()) and len(sent) >= 1, "whole: only the Anthropic upstream was asked", asked_anywhere())
check(all("max_tokens" in b for b in sent), "whole: the Messages requests carry max_tokens", sent)
ok("chat whole")

chunks = list(c.chat.completions.create(model=MODEL, messages=ASK, stream=True, stream_options={"include_usage": True}))
text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
check(text == CAPITAL, "streamed: the deltas add up", text)
fins = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
check(fins == ["stop"], "streamed: one finish_reason stop", fins)
usage = [ch.usage for ch in chunks if ch.usage]
check(len(usage) == 1 and usage[0].completion_tokens > 0, "streamed: one usage chunk", usage)
ok("chat streamed")

for stream in (False, True):
    mode = "streamed" if stream else "whole"
    q = [{"role": "user", "content": "What is the weather in Paris?"}]
    if stream:
        chunks = list(c.chat.completions.create(model=MODEL, messages=q, tools=[TOOL], stream=True))
        calls = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
        check(len(calls) >= 1 and calls[0].function.name == "get_weather" and bool(calls[0].id), f"{mode}: the call's first chunk has its id and name", calls)
        args = "".join(tc.function.arguments or "" for tc in calls)
        call_id, name = calls[0].id, calls[0].function.name
        fins = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        check(fins == ["tool_calls"], f"{mode}: finish_reason tool_calls", fins)
    else:
        r = c.chat.completions.create(model=MODEL, messages=q, tools=[TOOL])
        check(r.choices[0].finish_reason == "tool_calls", f"{mode}: finish_reason tool_calls", r.model_dump_json())
        tc = r.choices[0].message.tool_calls[0]
        call_id, name, args = tc.id, tc.function.name, tc.function.arguments
    check(name == "get_weather" and json.loads(args) == {"city": "Paris"}, f"{mode}: the call", (name, args))
    q += [
        {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "tool_call_id": call_id, "content": TOOL_RESULT},
    ]
    clear_mocks()
    r = c.chat.completions.create(model=MODEL, messages=q, tools=[TOOL])
    check(r.choices[0].message.content == WEATHER, f"{mode}: the model used the tool's result", r.model_dump_json())
    bodies = [b for api, b in asked_anywhere() if api == "anthropic"]

    def has_result(body):
        last = body["messages"][-1]["content"]
        last = last if isinstance(last, list) else []
        return any(b.get("type") == "tool_result" and b.get("tool_use_id") == call_id for b in last)

    check(any(has_result(b) for b in bodies), f"{mode}: the Anthropic upstream got a tool_result for the call", bodies)
    ok(f"chat tool round trip {mode}")
