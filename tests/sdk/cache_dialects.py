"""The response cache through the official clients: the openai SDK's Chat
Completions (whole and streamed), its Responses API and the anthropic SDK's
Messages share one entry per canonical request; `x-conclave-cache` says
hit, miss or bypass; a hit's answer and usage are the original's, and it
makes no upstream call; another key never hits (scope "key").

Run by tests/it/sdk.rs on a route with `cache = {...}`.
"""

import time

import anthropic

from common import *  # noqa: F403

c = client()
other = client(os.environ["OTHER_API_KEY"])
a = anthropic.Anthropic(api_key=os.environ["OPENAI_API_KEY"], base_url=os.environ["OPENAI_BASE_URL"].removesuffix("/v1"), max_retries=0, timeout=30)

# A prompt of its own, so no earlier run's entry answers it.
Q = f"What is the capital of France? ({time.time_ns()})"
ASK = [{"role": "user", "content": Q}]
CAP = 64


def upstream_calls():
    return len(mock_requests())


def cache_of(raw):
    return raw.headers.get("x-conclave-cache")


clear_mock()
raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=ASK, max_tokens=CAP, temperature=0)
first = raw.parse()
check(cache_of(raw) == "miss", "chat whole: the first is a miss", dict(raw.headers))
check(first.choices[0].message.content == CAPITAL, "chat whole: the mock's answer", dump(first))
calls = upstream_calls()
check(calls >= 1, "chat whole: a miss calls upstream", calls)
ok("miss")

raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=ASK, max_tokens=CAP, temperature=0)
hit = raw.parse()
check(cache_of(raw) == "hit", "chat whole: the second is a hit", dict(raw.headers))
check(raw.headers.get("age") is not None and int(raw.headers["age"]) >= 0, "chat whole: a hit says its age", dict(raw.headers))
check(hit.choices[0].message.content == first.choices[0].message.content, "chat whole: the same answer", dump(hit))
check(hit.id != first.id, "chat whole: a new id", (hit.id, first.id))
check(hit.usage.prompt_tokens == first.usage.prompt_tokens and hit.usage.completion_tokens == first.usage.completion_tokens,
      "chat whole: usage says what the original cost", (hit.usage, first.usage))
check(upstream_calls() == calls, "chat whole: a hit makes no upstream call", upstream_calls())
ok("hit")

raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=ASK, max_tokens=CAP, temperature=0, stream=True, stream_options={"include_usage": True})
check(cache_of(raw) == "hit", "chat streamed: a hit (stream is not in the key)", dict(raw.headers))
chunks = list(raw.parse())
text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
check(text == CAPITAL, "chat streamed: the answer replayed as a stream", text)
usage = [ch.usage for ch in chunks if ch.usage]
check(len(usage) == 1 and usage[0].completion_tokens == first.usage.completion_tokens, "chat streamed: with the original's usage", usage)
check(upstream_calls() == calls, "chat streamed: no upstream call", upstream_calls())
ok("streamed hit")

raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=ASK, max_tokens=CAP, temperature=0, extra_headers={"x-conclave-cache": "bypass"})
check(cache_of(raw) == "bypass", "bypass: x-conclave-cache: bypass skips the lookup", dict(raw.headers))
check(upstream_calls() > calls, "bypass: it calls upstream", upstream_calls())
calls = upstream_calls()
raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=ASK, max_tokens=CAP, temperature=0, extra_headers={"Cache-Control": "no-cache"})
check(cache_of(raw) == "bypass", "bypass: Cache-Control: no-cache too", dict(raw.headers))
check(upstream_calls() > calls, "bypass: no-cache calls upstream", upstream_calls())
ok("bypass")

raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=ASK, max_tokens=CAP, temperature=0.9)
check(cache_of(raw) == "off", "off: a warm temperature is not cached", dict(raw.headers))
ok("off")

raw = other.chat.completions.with_raw_response.create(model=MODEL, messages=ASK, max_tokens=CAP, temperature=0)
check(cache_of(raw) == "miss", "scope key: another key never hits", dict(raw.headers))
ok("another key")

calls = upstream_calls()
raw = c.responses.with_raw_response.create(model=MODEL, input=Q, max_output_tokens=CAP, temperature=0, store=False)
r = raw.parse()
check(cache_of(raw) == "hit", "responses: the chat entry answers the Responses API", dict(raw.headers))
check(r.output_text == CAPITAL, "responses: the same answer", dump(r))
check(upstream_calls() == calls, "responses: no upstream call", upstream_calls())
ok("responses hit")

raw = a.messages.with_raw_response.create(model=MODEL, max_tokens=CAP, messages=ASK, extra_body={"temperature": 0})
m = raw.parse()
check(raw.headers.get("x-conclave-cache") == "hit", "messages: the chat entry answers the Messages API", dict(raw.headers))
check(m.content[0].text == CAPITAL, "messages: the same answer", m)
check(upstream_calls() == calls, "messages: no upstream call", upstream_calls())
ok("messages hit")
