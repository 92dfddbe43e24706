"""A tool round trip: the model asks for get_weather (tool_use), the client
sends a tool_result back and gets the answer, whole and streamed."""

from anth_common import *  # noqa: F403



def round_trip_ok(msgs):
    """The conversation ends with the call and its result, ids matching."""
    msgs = [x for x in msgs if x["role"] != "system"]
    if len(msgs) < 2:
        return False
    call, result = msgs[-2], msgs[-1]
    if result["role"] == "tool":
        ids = [t["id"] for t in call.get("tool_calls") or []]
        return result["tool_call_id"] in ids and TOOL_RESULT in json.dumps(result["content"])
    blocks = result["content"] if isinstance(result["content"], list) else []
    uses = [b["id"] for b in call["content"] if isinstance(call["content"], list) and b["type"] == "tool_use"]
    return any(b["type"] == "tool_result" and b["tool_use_id"] in uses and TOOL_RESULT in json.dumps(b["content"]) for b in blocks)


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
    # Upstream saw the call and its result, with matching ids (in the
    # Messages or the Chat Completions format).
    shapes = [(api, b["messages"]) for api, b in asked_anywhere() if TOOL_RESULT in json.dumps(b.get("messages"))]
    check(any(round_trip_ok(msgs) for _, msgs in shapes), f"{mode}: a model got the call then its result", shapes)
    ok(f"tool round trip {mode}")
