"""Errors as the SDK's typed exceptions: an unknown model is NotFoundError,
a wrong key AuthenticationError, each with Anthropic's error body; whole and
streamed."""

from anth_common import *  # noqa: F403

ASK = [{"role": "user", "content": "What is the capital of France?"}]


def expect(exc, status, kind, call, what):
    try:
        got = call()
        if hasattr(got, "__iter__") and not hasattr(got, "content"):
            list(got)
    except exc as e:
        check(e.status_code == status, f"{what}: status {status}", e.status_code)
        body = e.body if isinstance(e.body, dict) else {}
        check(body.get("type") == "error", f"{what}: body type error", e.body)
        check(body.get("error", {}).get("type") == kind, f"{what}: error.type {kind}", e.body)
        check(bool(body.get("error", {}).get("message")), f"{what}: a message", e.body)
        check(e.response.headers.get("request-id") or e.response.headers.get("x-request-id"), f"{what}: a request id header", dict(e.response.headers))
        ok(what)
        return
    except anthropic.APIError as e:
        raise AssertionError(f"[{MODEL}] {what}: want {exc.__name__}, got {type(e).__name__}: {e}")
    raise AssertionError(f"[{MODEL}] {what}: no error")


c = client()
for stream in (False, True):
    mode = "streamed" if stream else "whole"
    expect(anthropic.NotFoundError, 404, "not_found_error", lambda: c.messages.create(model="no-such-model", max_tokens=64, messages=ASK, stream=stream), f"unknown model {mode}")
    for bearer in (False, True):
        bad = client(key="sk-not-a-key-0123456789", bearer=bearer)
        expect(anthropic.AuthenticationError, 401, "authentication_error", lambda: bad.messages.create(model=MODEL, max_tokens=64, messages=ASK, stream=stream), f"wrong key {mode} (bearer={bearer})")
expect(anthropic.NotFoundError, 404, "not_found_error", lambda: c.messages.count_tokens(model="no-such-model", messages=ASK), "count_tokens unknown model")
expect(anthropic.BadRequestError, 400, "invalid_request_error", lambda: c.messages.create(model=MODEL, max_tokens=64, messages=[]), "no messages")
