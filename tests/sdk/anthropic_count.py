"""messages.count_tokens: a positive count that grows with the prompt, with
the key as x-api-key and as Bearer."""

from anth_common import *  # noqa: F403

for bearer in (False, True):
    auth = "bearer" if bearer else "x-api-key"
    c = client(bearer=bearer)
    short = c.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}])
    check(isinstance(short.input_tokens, int) and short.input_tokens > 0, f"count_tokens ({auth}): input_tokens > 0", dump(short))
    long = c.messages.count_tokens(
        model=MODEL,
        system="You are a geography teacher. " * 20,
        messages=[{"role": "user", "content": "What is the capital of France? " * 50}],
        tools=[WEATHER_TOOL],
    )
    check(long.input_tokens > short.input_tokens, f"count_tokens ({auth}): a longer prompt counts more", (short.input_tokens, long.input_tokens))
    ok(f"count_tokens ({auth}): {short.input_tokens} < {long.input_tokens}")

raw = client().messages.with_raw_response.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
print("count_tokens headers:", {k: v for k, v in raw.headers.items() if k.startswith("x-conclave")})
