"""A tool round trip: the model asks for get_weather (tool_use), the client
sends a tool_result back and gets the answer, whole and streamed."""

from anth_common import *  # noqa: F403

c = client()
ASK = {"role": "user", "content": "What is the weather in Paris?"}

for stream in (False, True):
    mode = "streamed" if stream else "whole"
    clear_mocks()
    args = dict(model=MODEL, max_tokens=512, messages=[ASK], tools=[WEATHER_TOOL], tool_choice={"type": "auto"})
    if stream:
        events = raw_events(c.messages.create(stream=True, **args))
        starts = [e.content_block for e in events if e.type == "content_block_start"]
        check(any(b.type == "tool_use" for b in starts), f"{mode}: a tool_use block starts", [dump(b) for b in starts])
        partial = "".join(e.delta.partial_json for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
        check(json.loads(partial) == {"city": "Paris"}, f"{mode}: the input_json_delta parts add up", partial)
        stop = [e.delta.stop_reason for e in events if e.type == "message_delta"]
        check(stop == ["tool_use"], f"{mode}: stop_reason tool_use", stop)
        with c.messages.stream(**args) as s:
            m = s.get_final_message()
    else:
        m = c.messages.create(**args)
    message_ok(m, mode, stop_reason="tool_use")
    uses = [b for b in m.content if b.type == "tool_use"]
    check(len(uses) == 1, f"{mode}: one tool_use block", dump(m))
    use = uses[0]
    check(use.name == "get_weather", f"{mode}: the tool's name", dump(use))
    check(use.input == {"city": "Paris"}, f"{mode}: the tool's input", dump(use))
    check(bool(use.id), f"{mode}: a tool_use id", dump(use))
    # The tool reached a model as a tool (whichever API it speaks).
    tools = []
    for api, body in asked_anywhere():
        for t in body.get("tools") or []:
            tools.append(t.get("name") or t.get("function", {}).get("name"))
    check("get_weather" in tools, f"{mode}: the tool reached a model", asked_anywhere())

    # The round trip: the assistant turn and the tool's result go back.
    clear_mocks()
    history = [
        ASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": TOOL_RESULT}]},
    ]
    args = dict(model=MODEL, max_tokens=512, messages=history, tools=[WEATHER_TOOL])
    if stream:
        with c.messages.stream(**args) as s:
            got = "".join(s.text_stream)
            m2 = s.get_final_message()
        check(got == WEATHER, f"{mode}: the streamed answer", got)
    else:
        m2 = c.messages.create(**args)
    message_ok(m2, f"{mode} second turn")
    check(text_of(m2) == WEATHER, f"{mode}: the model used the tool's result", dump(m2))
    # Upstream saw the call and its result, with matching ids.
    seen = False
    for api, body in asked_anywhere():
        if TOOL_RESULT not in json.dumps(body):
            continue
        msgs = [x for x in body["messages"] if x["role"] != "system"]
        if api == "anthropic":
            last = msgs[-1]["content"][0]
            prev = [b for b in msgs[-2]["content"] if b["type"] == "tool_use"][0]
            check(last["type"] == "tool_result" and last["tool_use_id"] == prev["id"], f"{mode}: Anthropic upstream got tool_use then tool_result", msgs[-2:])
        else:
            check(msgs[-1]["role"] == "tool" and msgs[-2]["tool_calls"][0]["id"] == msgs[-1]["tool_call_id"], f"{mode}: OpenAI upstream got the call then a tool message", msgs[-2:])
            check(msgs[-1]["content"] == TOOL_RESULT or TOOL_RESULT in json.dumps(msgs[-1]["content"]), f"{mode}: the tool message", msgs[-1])
        seen = True
    check(seen, f"{mode}: the tool result reached a model", asked_anywhere())
    ok(f"tool round trip {mode}")
