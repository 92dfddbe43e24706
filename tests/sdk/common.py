"""Shared by the SDK scripts: the client, the route under test, checks that
say what they saw, and what the mock upstream was asked.

Each script is run by tests/it/sdk.rs with OPENAI_BASE_URL (the gateway's /v1),
OPENAI_API_KEY (a key of the gateway), OTHER_API_KEY (another key), MODEL
(the route) and MOCK_URL (the mock upstream, for /mock/requests).
"""

import json
import os
import sys
import urllib.request

from openai import OpenAI

MODEL = os.environ["MODEL"]
MOCK_URL = os.environ["MOCK_URL"]

# The mock's answers (tests/it/sdk.rs writes the same strings into its config).
CAPITAL = "The capital of France is Paris."
WEATHER = "It is 18C and sunny in Paris."
TOOL_RESULT = "TOOL-RESULT: 18C, sunny"
MEMO = "Noted: MEMO-42"
CONTINUED = "Continuing after MEMO-42: the word was AZURE."
ESSAY = "Once upon a time, in a land"

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def client(key=None):
    # No retries: a gateway error must show as itself, not as a retried one.
    return OpenAI(api_key=key or os.environ["OPENAI_API_KEY"], max_retries=0, timeout=30)


def check(cond, what, seen=None):
    if not cond:
        detail = "" if seen is None else f"\n  saw: {seen!r}"
        raise AssertionError(f"[{MODEL}] {what}{detail}")


def dump(obj):
    return obj.model_dump_json(indent=1) if hasattr(obj, "model_dump_json") else repr(obj)


def mock_requests():
    """The chat requests the mock upstream received, oldest first."""
    with urllib.request.urlopen(f"{MOCK_URL}/mock/requests", timeout=10) as r:
        return json.load(r)["requests"]


def clear_mock():
    req = urllib.request.Request(f"{MOCK_URL}/mock/requests", method="DELETE")
    urllib.request.urlopen(req, timeout=10).read()


def usage_ok(usage, where):
    check(usage is not None, f"{where}: usage is missing")
    check(usage.input_tokens > 0, f"{where}: input_tokens > 0", usage)
    check(usage.output_tokens > 0, f"{where}: output_tokens > 0", usage)
    check(
        usage.total_tokens == usage.input_tokens + usage.output_tokens,
        f"{where}: total_tokens = input + output",
        usage,
    )
    check(usage.input_tokens_details is not None, f"{where}: input_tokens_details", usage)
    check(usage.output_tokens_details is not None, f"{where}: output_tokens_details", usage)


def stream_events(stream):
    """Every event of a streamed response, checking sequence numbers rise."""
    events = list(stream)
    check(len(events) >= 3, "a stream of at least three events", [e.type for e in events])
    seqs = [e.sequence_number for e in events]
    check(all(b > a for a, b in zip(seqs, seqs[1:])), "sequence_number strictly increasing", seqs)
    return events


def ok(name):
    print(f"ok: {name} [{MODEL}]")
    sys.stdout.flush()
