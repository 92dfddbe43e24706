"""A route whose upstream breaks mid-stream: the stream ends with an `error`
event and `response.failed` (then closes: Codex waits for the close), and
a whole request is an OpenAI-shaped 5xx."""

import openai

from common import *  # noqa: F403

c = client()

events = stream_events(c.responses.create(model=MODEL, input="Count to ten.", stream=True, store=False))
types = [e.type for e in events]
check(types[0] == "response.created", "created first", types)
check(types[-2:] == ["error", "response.failed"], "error, then response.failed, last", types)
check("response.output_text.delta" in types, "some text came before the break", types)
err = events[-2]
check(bool(err.message) and bool(err.code), "the error event has a code and a message", dump(err))
failed = events[-1].response
check(failed.status == "failed", "status failed", dump(failed))
check(failed.error is not None and failed.error.message == err.message, "response.error repeats the error", dump(failed))
ok("streamed failure")

try:
    c.responses.create(model=MODEL, input="Count to ten.", store=False)
    check(False, "a whole request on a broken upstream is an error")
except openai.APIStatusError as e:
    check(e.status_code >= 500, "a 5xx", e.status_code)
    check(isinstance(e.body, dict) and e.body.get("message") and e.body.get("type"), "an OpenAI-shaped error", e.body)
ok("whole failure")
