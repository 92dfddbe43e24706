"""messages.create whole and streamed (raw events and the messages.stream
helper), system as a string and as blocks, with the key sent as
`x-api-key` and as `Authorization: Bearer`."""

from anth_common import *  # noqa: F403

ASK = [{"role": "user", "content": "What is the capital of France?"}]

for bearer in (False, True):
    auth = "bearer" if bearer else "x-api-key"
    c = client(bearer=bearer)
    # Whole, system as a string.
    m = c.messages.create(model=MODEL, max_tokens=256, system="Be brief.", messages=ASK)
    message_ok(m, f"whole ({auth})")
    check(text_of(m) == CAPITAL, f"whole ({auth}): the mock's answer", dump(m))
    check([b.type for b in m.content] == ["text"], f"whole ({auth}): one text block", dump(m))
    ok(f"messages.create whole ({auth})")

c = client()
# System as blocks, a stop sequence, temperature, top_k and metadata:
# accepted.
m = c.messages.create(
    model=MODEL,
    max_tokens=256,
    system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in English."}],
    messages=[{"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}],
    stop_sequences=["\n\nHuman:"],
    extra_body={"temperature": 0.2, "top_k": 40},  # not parameters of this SDK any more
    metadata={"user_id": "sdk-test-user"},
)
message_ok(m, "system blocks")
check(text_of(m) == CAPITAL, "system blocks: the mock's answer", dump(m))
# The system prompt reached the model.
sent = [b for _, b in asked_anywhere() if "Be brief." in json.dumps(b)]
check(len(sent) > 0, "system blocks: the system prompt reached an upstream", asked_anywhere())
ok("system as blocks")

# Raw stream: the documented events in order, the deltas add up.
events = raw_events(c.messages.create(model=MODEL, max_tokens=256, messages=ASK, stream=True))
start = events[0].message
check(start.role == "assistant" and start.id.startswith("msg_"), "message_start carries the message", dump(start))
check(start.content == [], "message_start's content is empty", dump(start))
check(start.usage.input_tokens > 0, "message_start usage.input_tokens > 0", dump(start.usage))
text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
check(text == CAPITAL, "raw stream: the text deltas add up to the answer", text)
delta = [e for e in events if e.type == "message_delta"][0]
check(delta.delta.stop_reason == "end_turn", "message_delta stop_reason end_turn", dump(delta))
check(delta.usage.output_tokens > 0, "message_delta usage.output_tokens > 0", dump(delta))
ok("raw stream")

# The messages.stream helper: text_stream and get_final_message().
for bearer in (False, True):
    auth = "bearer" if bearer else "x-api-key"
    with client(bearer=bearer).messages.stream(model=MODEL, max_tokens=256, messages=ASK) as s:
        got = "".join(s.text_stream)
        final = s.get_final_message()
    check(got == CAPITAL, f"stream helper ({auth}): text_stream", got)
    message_ok(final, f"stream helper ({auth}): final message")
    check(text_of(final) == CAPITAL, f"stream helper ({auth}): get_final_message text", dump(final))
    ok(f"messages.stream ({auth})")

with c.messages.stream(model=MODEL, max_tokens=256, messages=ASK) as s:
    kinds = [e.type for e in s]
    final = s.get_final_message()
order = [k for k in kinds if k in ORDER]
check(order[0] == "message_start" and order[-1] == "message_stop", "stream helper: message_start … message_stop", kinds)
check("text" in kinds, "stream helper: text events", kinds)
check(final.usage.output_tokens > 0, "stream helper: usage after the stream", dump(final.usage))
ok("messages.stream events")
