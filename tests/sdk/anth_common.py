"""Shared by the `anthropic` SDK scripts: the client, the route under test,
checks that say what they saw, and what the mock upstreams were asked.

Each script is run by tests/it/anthropic_sdk.rs with ANTHROPIC_BASE_URL (the
gateway, without /v1), OPENAI_BASE_URL (the gateway's /v1), OPENAI_API_KEY
(a key of the gateway), OTHER_API_KEY (another key), MODEL (the route),
MOCK_URL (the OpenAI mock upstream) and ANTH_MOCK_URL (the Anthropic mock
upstream), both for /mock/requests.
"""

import json
import os
import sys
import urllib.request

import anthropic

MODEL = os.environ["MODEL"]
BASE_URL = os.environ["ANTHROPIC_BASE_URL"]
KEY = os.environ["OPENAI_API_KEY"]
MOCKS = {"openai": os.environ["MOCK_URL"], "anthropic": os.environ["ANTH_MOCK_URL"]}

# The mock's answers (tests/it/sdk_setup/mod.rs writes the same strings into
# its config).
CAPITAL = "The capital of France is Paris."
WEATHER = "It is 18C and sunny in Paris."
TOOL_RESULT = "TOOL-RESULT: 18C, sunny"

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}

# A stream's events in the order Anthropic documents them (pings anywhere).
ORDER = ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]


def client(key=None, bearer=False):
    """The official client on the gateway; `bearer` sends the key as
    `Authorization: Bearer` (auth_token) instead of `x-api-key`. No retries:
    a gateway error must show as itself."""
    key = key or KEY
    if bearer:
        return anthropic.Anthropic(base_url=BASE_URL, auth_token=key, api_key=None, max_retries=0, timeout=30)
    return anthropic.Anthropic(base_url=BASE_URL, api_key=key, auth_token=None, max_retries=0, timeout=30)


def check(cond, what, seen=None):
    if not cond:
        detail = "" if seen is None else f"\n  saw: {seen!r}"
        raise AssertionError(f"[{MODEL}] {what}{detail}")


def dump(obj):
    return obj.model_dump_json(indent=1) if hasattr(obj, "model_dump_json") else repr(obj)


def mock_requests(api):
    """The requests the `api` mock upstream received, oldest first."""
    with urllib.request.urlopen(f"{MOCKS[api]}/mock/requests", timeout=10) as r:
        return json.load(r)["requests"]


def clear_mocks():
    for url in MOCKS.values():
        req = urllib.request.Request(f"{url}/mock/requests", method="DELETE")
        urllib.request.urlopen(req, timeout=10).read()


def asked_anywhere():
    """Every (api, body) the mocks received since the last clear."""
    return [(api, q["body"]) for api in MOCKS for q in mock_requests(api)]


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


def message_ok(msg, where, stop_reason="end_turn"):
    """A whole Message in Anthropic's shape."""
    check(msg.type == "message", f"{where}: type message", dump(msg))
    check(msg.role == "assistant", f"{where}: role assistant", dump(msg))
    check(isinstance(msg.id, str) and msg.id.startswith("msg_"), f"{where}: an id msg_…", msg.id)
    check(bool(msg.model), f"{where}: a model", dump(msg))
    check(msg.stop_reason == stop_reason, f"{where}: stop_reason {stop_reason}", msg.stop_reason)
    usage_ok(msg.usage, where)


def usage_ok(usage, where):
    check(usage is not None, f"{where}: usage is missing")
    check(usage.input_tokens > 0, f"{where}: input_tokens > 0", usage)
    check(usage.output_tokens > 0, f"{where}: output_tokens > 0", usage)


def raw_events(stream):
    """Every event of a raw stream (`create(stream=True)`), checking the
    order Anthropic documents: message_start first, message_stop last, the
    blocks in between opened, filled and closed index by index."""
    events = list(stream)
    types = [e.type for e in events]
    check(len(events) >= 5, "a stream of at least five events", types)
    check(types[0] == "message_start", "message_start first", types)
    check(types[-1] == "message_stop", "message_stop last", types)
    check(types.count("message_delta") == 1, "one message_delta", types)
    check(types.index("message_delta") == len(types) - 2 or all(t == "ping" for t in types[types.index("message_delta") + 1 : -1]), "message_delta just before message_stop", types)
    known = set(ORDER) | {"ping"}
    check(all(t in known for t in types), "only documented event types", types)
    open_block = None
    seen = []
    for e in events:
        if e.type == "content_block_start":
            check(open_block is None, "blocks do not overlap", types)
            check(e.index == len(seen), "block indexes count up from 0", [getattr(x, "index", None) for x in events])
            open_block = e.index
            seen.append(e.content_block.type)
        elif e.type == "content_block_delta":
            check(e.index == open_block, "a delta belongs to the open block", types)
        elif e.type == "content_block_stop":
            check(e.index == open_block, "a stop closes the open block", types)
            open_block = None
    check(open_block is None, "every block closed", types)
    return events


def ok(name):
    print(f"ok: {name} [{MODEL}]")
    sys.stdout.flush()
