"""Extended thinking asked for (`thinking.type = enabled` with a budget):
the request is accepted whole and streamed, any thinking block that comes
back is well formed (thinking text and a signature, before the text), and
the answer is the mock's. EXPECT_THINKING=1: the answering model is an
Anthropic mock, which thinks when asked: its thinking block must come back.
PASS_THINKING=1: the route forwards to an Anthropic upstream verbatim,
which must get the `thinking` object as sent."""

import os

from anth_common import *  # noqa: F403

c = client()
ASK = [{"role": "user", "content": "What is the capital of France?"}]
# What the Anthropic mock's thinking block says.
THOUGHT = "Let me think this through step by step."
THINK = {"type": "enabled", "budget_tokens": 1024}

for stream in (False, True):
    mode = "streamed" if stream else "whole"
    clear_mocks()
    args = dict(model=MODEL, max_tokens=2048, messages=ASK, thinking=THINK)
    if stream:
        events = raw_events(c.messages.create(stream=True, **args))
        kinds = [e.delta.type for e in events if e.type == "content_block_delta"]
        with c.messages.stream(**args) as s:
            m = s.get_final_message()
    else:
        m = c.messages.create(**args)
        kinds = []
    message_ok(m, mode)
    types = [b.type for b in m.content]
    check(text_of(m) == CAPITAL, f"{mode}: the mock's answer", dump(m))
    check(types[-1] == "text", f"{mode}: the text comes last", types)
    for b in m.content:
        if b.type == "thinking":
            check(bool(b.thinking) and bool(b.signature), f"{mode}: a thinking block has thinking and a signature", dump(b))
    if os.environ.get("EXPECT_THINKING") == "1":
        thoughts = [b.thinking for b in m.content if b.type == "thinking"]
        check(thoughts == [THOUGHT], f"{mode}: the mock's thinking block came back", dump(m))
        check(types == ["thinking", "text"], f"{mode}: thinking, then text", types)
        if stream:
            check("thinking_delta" in kinds and "signature_delta" in kinds, f"{mode}: thinking_delta and signature_delta", kinds)
    if "thinking" in types:
        check("thinking_delta" in kinds or not stream, f"{mode}: thinking streamed as thinking_delta", kinds)
    if os.environ.get("PASS_THINKING") == "1":
        sent = [b for api, b in asked_anywhere() if api == "anthropic"]
        check(len(sent) >= 1, f"{mode}: the Anthropic upstream was asked", asked_anywhere())
        check(sent[-1].get("thinking") == THINK, f"{mode}: the upstream got the thinking object verbatim", sent[-1])
    print(f"thinking {mode}: blocks {types}, deltas {sorted(set(kinds))}")
    ok(f"thinking {mode}")
