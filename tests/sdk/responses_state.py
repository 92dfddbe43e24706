"""Stored responses: previous_response_id, retrieve, input_items.list,
delete, and another key's 404."""

import openai

from common import *  # noqa: F403

c = client()
other = client(os.environ["OTHER_API_KEY"])  # noqa: F405

first = c.responses.create(model=MODEL, input="Remember: the secret word is AZURE.")
check(first.status == "completed" and first.output_text == MEMO, "first turn", dump(first))
check(getattr(first, "store", True) is not False, "stored by default", dump(first))

for stream in (False, True):
    mode = "streamed" if stream else "whole"
    args = dict(model=MODEL, previous_response_id=first.id, input="What was the secret word?")
    if stream:
        second = stream_events(c.responses.create(stream=True, **args))[-1].response
    else:
        second = c.responses.create(**args)
    check(second.output_text == CONTINUED, f"{mode}: the model saw the first turn", dump(second))
    check(second.previous_response_id == first.id, f"{mode}: previous_response_id echoed", dump(second))
    msgs = mock_requests()[-1]["body"]["messages"]
    said = [(m["role"], m.get("content")) for m in msgs if m["role"] in ("user", "assistant")]
    check(
        said[-3:] == [("user", "Remember: the secret word is AZURE."), ("assistant", MEMO), ("user", "What was the secret word?")],
        f"{mode}: upstream got the conversation in order",
        said,
    )
    ok(f"previous_response_id {mode}")

got = c.responses.retrieve(first.id)
check(got.id == first.id and got.output_text == MEMO and got.status == "completed", "retrieve", dump(got))
ok("retrieve")

items = c.responses.input_items.list(first.id)
texts = [p.text for i in items.data if i.type == "message" for p in i.content if hasattr(p, "text")]
check("Remember: the secret word is AZURE." in texts, "input_items has the input", dump(items))
ok("input_items")

# The SDK's auto-pagination walks the input items page by page (`after`).
many = c.responses.create(model=MODEL, input=[{"role": "user", "content": w} for w in ("one", "two", "three")])
pages = c.responses.input_items.list(many.id, limit=1, order="asc")
check(len(pages.data) == 1 and pages.has_more, "one item a page, more to come", dump(pages))
walked = [i.content[0].text for i in pages]
check(walked == ["one", "two", "three"], "auto-pagination, oldest first", walked)
newest = [i.content[0].text for i in c.responses.input_items.list(many.id, limit=2)]
check(newest == ["three", "two", "one"], "newest first by default", newest)
ok("input_items pages")

try:
    other.responses.retrieve(first.id)
    check(False, "another key's retrieve is a 404")
except openai.NotFoundError:
    pass
try:
    other.responses.create(model=MODEL, previous_response_id=first.id, input="And now?")
    check(False, "another key cannot continue it")
except (openai.NotFoundError, openai.BadRequestError) as e:
    check(e.body and e.body.get("param") == "previous_response_id", "the error names previous_response_id", e.body)
ok("other key")

d = c.responses.delete(first.id)
check(d is None or getattr(d, "deleted", True), "delete", d)
try:
    c.responses.retrieve(first.id)
    check(False, "retrieve after delete is a 404")
except openai.NotFoundError as e:
    check(e.body and e.body.get("type") == "invalid_request_error", "an OpenAI-shaped 404", e.body)
ok("delete")

unstored = c.responses.create(model=MODEL, input="What is the capital of France?", store=False)
try:
    c.responses.retrieve(unstored.id)
    check(False, "store=False keeps nothing")
except openai.NotFoundError:
    pass
ok("store false")
