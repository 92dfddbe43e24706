"""A blind arena through the Messages API: both contestants' answers as two
text blocks (A, then B; both say the same here), an arena id header (and
`arena_id` in the body) to vote with, no contestant's name anywhere, whole
and streamed."""

import urllib.request

from anth_common import *  # noqa: F403

c = client()
ASK = [{"role": "user", "content": "What is the capital of France?"}]
NAMES = ("a-good", "o-good")

for stream in (False, True):
    mode = "streamed" if stream else "whole"
    if stream:
        with c.messages.stream(model=MODEL, max_tokens=256, messages=ASK) as s:
            text = "".join(s.text_stream)
            m = s.get_final_message()
            headers = s.response.headers
    else:
        raw = c.messages.with_raw_response.create(model=MODEL, max_tokens=256, messages=ASK)
        m = raw.parse()
        headers = raw.headers
        text = text_of(m)
        check(raw.http_response.json().get("arena_id") == headers.get("x-conclave-arena-id"), f"{mode}: arena_id in the body", raw.http_response.text)
    texts = [b.text for b in m.content if b.type == "text"]
    check(texts == [CAPITAL, CAPITAL], f"{mode}: the two answers as two text blocks", dump(m))
    check(m.stop_reason == "end_turn", f"{mode}: stop_reason", dump(m))
    for name in NAMES:
        check(name not in dump(m), f"{mode}: no contestant's name in the answer", dump(m))
    arena = headers.get("x-conclave-arena-id")
    check(bool(arena), f"{mode}: an x-conclave-arena-id header", dict(headers))
    vote = urllib.request.Request(
        f"{BASE_URL}/v1/arena/{arena}/vote",
        data=json.dumps({"pick": "A"}).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {KEY}"},
        method="POST",
    )
    with urllib.request.urlopen(vote, timeout=10) as r:
        check(r.status == 200, f"{mode}: the vote counted", r.status)
    print(f"arena {mode}: {text!r}")
    ok(f"arena {mode}")
