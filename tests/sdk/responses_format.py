"""text.format: a JSON schema (and json_object), through create and the
SDK's parse helper."""

import json

from pydantic import BaseModel

from common import *  # noqa: F403

c = client()
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
    "additionalProperties": False,
}
ASK = "Reply in JSON: which city is the capital of France?"
WANT = {"city": "Paris", "country": "France"}

clear_mock()
r = c.responses.create(
    model=MODEL,
    input=ASK,
    text={"format": {"type": "json_schema", "name": "capital", "schema": SCHEMA, "strict": True}},
    store=False,
)
check(r.status == "completed", "completed", dump(r))
check(json.loads(r.output_text) == WANT, "the JSON answer", r.output_text)
check(r.text is not None and r.text.format.type == "json_schema", "the response echoes text.format", dump(r))
sent = [q["body"].get("response_format") for q in mock_requests()]
check(
    any(f and f.get("type") == "json_schema" and f["json_schema"]["schema"] == SCHEMA and f["json_schema"]["name"] == "capital" for f in sent),
    "the schema reached the model as response_format",
    sent,
)
ok("json_schema")


class Capital(BaseModel):
    city: str
    country: str


p = c.responses.parse(model=MODEL, input=ASK, text_format=Capital, store=False)
check(p.output_parsed == Capital(**WANT), "responses.parse output_parsed", dump(p))
ok("parse")

with c.responses.stream(model=MODEL, input=ASK, text_format=Capital, store=False) as s:
    final = s.get_final_response()
check(final.output_parsed == Capital(**WANT), "streamed parse", dump(final))
ok("streamed parse")

clear_mock()
r = c.responses.create(model=MODEL, input=ASK, text={"format": {"type": "json_object"}}, store=False)
check(json.loads(r.output_text) == WANT, "json_object answer", r.output_text)
sent = [q["body"].get("response_format") for q in mock_requests()]
check(any(f == {"type": "json_object"} for f in sent), "json_object reached the model", sent)
ok("json_object")
