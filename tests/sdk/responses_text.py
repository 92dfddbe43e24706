"""client.responses.create, whole and streamed, and the SDK's stream helper."""

from common import *  # noqa: F403

c = client()

# Whole, with instructions and a developer message as items.
r = c.responses.create(
    model=MODEL,
    instructions="Answer in one sentence.",
    input=[
        {"role": "developer", "content": "Be factual."},
        {"role": "user", "content": [{"type": "input_text", "text": "What is the capital of France?"}]},
    ],
    max_output_tokens=200,
    temperature=0.2,
    metadata={"suite": "sdk"},
    store=False,
)
check(r.id.startswith("resp_"), "id starts with resp_", r.id)
check(r.object == "response", "object is response", r.object)
check(r.status == "completed", "status completed", dump(r))
check(r.output_text == CAPITAL, "output_text is the mock's answer", r.output_text)
msgs = [i for i in r.output if i.type == "message"]
check(len(msgs) == 1, "one message item", dump(r))
check(msgs[0].role == "assistant", "the message is the assistant's", dump(r))
check([p.type for p in msgs[0].content] == ["output_text"], "one output_text part", dump(r))
check(msgs[0].content[0].text == CAPITAL, "the part's text", dump(r))
usage_ok(r.usage, "whole")
# The instructions and the developer message reached the model.
asked = mock_requests()[-1]["body"]["messages"]
said = " | ".join(str(m.get("content")) for m in asked)
check("Answer in one sentence." in said and "Be factual." in said, "instructions and developer text sent upstream", asked)
ok("whole")

# Streamed: the whole event sequence, in order.
events = stream_events(
    c.responses.create(model=MODEL, input="What is the capital of France?", stream=True, store=False)
)
types = [e.type for e in events]
check(types[0] == "response.created", "created first", types)
check(types[1] == "response.in_progress", "in_progress second", types)
check(types[-1] == "response.completed", "completed last", types)
core = [t for t in types if t not in ("response.created", "response.in_progress", "response.completed")]
deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
check(len(deltas) >= 1, "at least one output_text.delta", types)
want = (
    ["response.output_item.added", "response.content_part.added"]
    + ["response.output_text.delta"] * len(deltas)
    + ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
)
check(core == want, "the message's events in order", types)
text_done = next(e for e in events if e.type == "response.output_text.done")
check("".join(deltas) == CAPITAL == text_done.text, "the deltas spell the answer", (deltas, text_done.text))
created, done = events[0].response, events[-1].response
check(created.id == done.id and done.id.startswith("resp_"), "one response id throughout", (created.id, done.id))
check(created.status == "in_progress", "created: in_progress", created.status)
check(done.status == "completed", "completed: completed", dump(done))
check(done.output_text == CAPITAL, "completed carries the output", dump(done))
item_done = next(e for e in events if e.type == "response.output_item.done")
check(item_done.item.type == "message" and item_done.item.content[0].text == CAPITAL, "output_item.done has the whole message", dump(item_done))
usage_ok(done.usage, "streamed")
ok("streamed")

# The SDK's own accumulator (responses.stream) rebuilds the same answer.
with c.responses.stream(model=MODEL, input="What is the capital of France?", store=False) as s:
    texts = [e.delta for e in s if e.type == "response.output_text.delta"]
    final = s.get_final_response()
check("".join(texts) == CAPITAL, "stream helper deltas", texts)
check(final.output_text == CAPITAL and final.status == "completed", "stream helper final response", dump(final))
ok("stream helper")

# Cut by max_output_tokens: incomplete, whole and streamed.
r = c.responses.create(model=MODEL, input="Write a long essay.", max_output_tokens=16, store=False)
check(r.status == "incomplete", "cut: status incomplete", dump(r))
check(r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens", "cut: incomplete_details", dump(r))
check(r.output_text == ESSAY, "cut: the text so far", r.output_text)
events = stream_events(c.responses.create(model=MODEL, input="Write a long essay.", max_output_tokens=16, stream=True, store=False))
check(events[-1].type == "response.incomplete", "cut streamed: response.incomplete last", [e.type for e in events])
last = events[-1].response
check(last.status == "incomplete" and last.incomplete_details.reason == "max_output_tokens", "cut streamed: the response", dump(last))
check(last.output_text == ESSAY, "cut streamed: the text so far", last.output_text)
ok("incomplete")
