"""A function-tool round trip, stateless (the client sends the history back
with function_call_output, as Codex and the Agents SDK do), whole and
streamed."""

import json

from common import *  # noqa: F403

c = client()
ASK = "What is the weather in Paris?"

for stream in (False, True):
    mode = "streamed" if stream else "whole"
    clear_mock()
    args = dict(model=MODEL, input=ASK, tools=[WEATHER_TOOL], tool_choice="auto", parallel_tool_calls=False, store=False)
    if stream:
        events = stream_events(c.responses.create(stream=True, **args))
        types = [e.type for e in events]
        check(types[-1] == "response.completed", f"{mode}: completed last", types)
        arg_deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        arg_done = [e for e in events if e.type == "response.function_call_arguments.done"]
        check(len(arg_done) == 1, f"{mode}: one function_call_arguments.done", types)
        check(arg_deltas == arg_done[0].arguments, f"{mode}: the argument deltas add up", (arg_deltas, arg_done[0].arguments))
        added = [e.item for e in events if e.type == "response.output_item.added"]
        check(any(i.type == "function_call" for i in added), f"{mode}: output_item.added for the call", types)
        r = events[-1].response
    else:
        r = c.responses.create(**args)
    calls = [i for i in r.output if i.type == "function_call"]
    check(len(calls) == 1, f"{mode}: one function_call item", dump(r))
    call = calls[0]
    check(call.name == "get_weather", f"{mode}: the tool's name", dump(call))
    check(json.loads(call.arguments) == {"city": "Paris"}, f"{mode}: the arguments", call.arguments)
    check(bool(call.call_id), f"{mode}: a call_id", dump(call))
    check(r.output_text == "", f"{mode}: no text beside the call", r.output_text)
    # Upstream it was a chat tool.
    sent = mock_requests()[-1]["body"]
    check([t["function"]["name"] for t in sent.get("tools", [])] == ["get_weather"], f"{mode}: the tool reached the model as a chat tool", sent.get("tools"))

    # The round trip: the call and its output go back.
    history = [{"role": "user", "content": ASK}] + [i.model_dump(exclude_none=True) for i in r.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT})
    args = dict(model=MODEL, input=history, tools=[WEATHER_TOOL], store=False)
    if stream:
        events = stream_events(c.responses.create(stream=True, **args))
        r2 = events[-1].response
        check("".join(e.delta for e in events if e.type == "response.output_text.delta") == WEATHER, f"{mode}: the deltas of the answer", [e.type for e in events])
    else:
        r2 = c.responses.create(**args)
    check(r2.status == "completed", f"{mode}: second turn completed", dump(r2))
    check(r2.output_text == WEATHER, f"{mode}: the model used the tool's output", r2.output_text)
    usage_ok(r2.usage, mode)
    # (A judge panel's guidance is a system message after the conversation.)
    msgs = [m for m in mock_requests()[-1]["body"]["messages"] if m["role"] != "system"]
    roles = [m["role"] for m in msgs]
    check(roles[-2:] == ["assistant", "tool"], f"{mode}: upstream saw the call and its result", msgs)
    check(msgs[-2]["tool_calls"][0]["id"] == msgs[-1]["tool_call_id"] == call.call_id, f"{mode}: call ids match", msgs)
    check(msgs[-1]["content"] == TOOL_RESULT, f"{mode}: the tool message", msgs[-1])
    ok(f"tool round trip {mode}")
