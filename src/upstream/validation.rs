//! A server's request-validation error sent as HTTP 500: the client's
//! 400, not the server's failure. Some servers answer a request they find
//! invalid with a 500:
//! - llama-cpp-python: `{"error": {"message": "N validation errors:\n
//!   {'type': 'string_type', 'loc': ('body', 'messages', 1, '…Message',
//!   'content'), …}…", "type": "internal_server_error"}}` (FastAPI's
//!   dump of pydantic's errors, Python reprs);
//! - pydantic's own text, as vLLM and other Python servers pass it on:
//!   `1 validation error for ChatCompletionRequest\nmessages.1.content\n
//!   Input should be a valid string [type=string_type, …]`;
//! - FastAPI's JSON: `{"detail": [{"type": "missing", "loc": ["body",
//!   "messages", 1, "content"], "msg": "Field required"}]}`;
//! - llama.cpp's server: `{"error": {"code": 500, "message":
//!   "[json.exception.type_error.302] type must be string, but is null",
//!   "type": "server_error"}}` (a JSON type error reading the request);
//! - Go's JSON decoder (Ollama's server): `json: cannot unmarshal
//!   string into Go struct field ChatRequest.messages.content of type
//!   []api.Part`;
//! - a body that says it is a client error under a 500 status: an error
//!   `type` of `invalid_request_error` or `BadRequestError` (vLLM's), or
//!   a `code` of 400 or 422.
//!
//! [`recognise`] reads such a body into a [`Rejection`]: the field's path
//! as a client writes it (`messages[1].content`), built only from field
//! names (`[a-z0-9_]`) and indexes, and a short fixed kind of problem.
//! Nothing else of the server's text (values, class names, reprs, paths)
//! is kept. Only a 500 is read so: a 502, 503 or 504 is a proxy's or the
//! server's own trouble.

use serde_json::Value;

/// The longest field path kept, in segments.
const MAX_SEGMENTS: usize = 8;
/// The longest field name kept.
const MAX_NAME: usize = 40;
/// The most validation errors looked at.
const MAX_ERRORS: usize = 64;

/// What was wrong with the request, as far as the server's words say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `messages[1].content`, when the server named a field.
    pub field: Option<String>,
    /// `missing`, `wrong type`, `not an allowed value`, …: a fixed text.
    pub problem: &'static str,
}

/// The request-validation error a 500 with this body reports, if it is
/// one: `body` is the parsed body, `text` the raw one.
pub fn recognise(status: u16, body: Option<&Value>, text: &str) -> Option<Rejection> {
    if status != 500 {
        return None;
    }
    if let Some(r) = body.and_then(fastapi_json) {
        return Some(r);
    }
    let err = body.map(|v| v.get("error").unwrap_or(v));
    let message = match err {
        Some(Value::Object(o)) => o.get("message").and_then(Value::as_str),
        Some(Value::String(s)) => Some(s.as_str()),
        _ => None,
    }
    .unwrap_or(text);
    if let Some(r) = python_dump(message)
        .or_else(|| pydantic_text(message))
        .or_else(|| json_exception(message))
        .or_else(|| go_unmarshal(message))
    {
        return Some(r);
    }
    err.filter(|e| says_client_error(e)).map(|_| Rejection {
        field: None,
        problem: "invalid",
    })
}

/// An error object that calls itself the client's fault.
fn says_client_error(e: &Value) -> bool {
    let kind = e.get("type").and_then(Value::as_str);
    let code = e.get("code").and_then(Value::as_u64);
    matches!(kind, Some("invalid_request_error" | "BadRequestError"))
        || matches!(code, Some(400 | 422))
}

/// One segment of a validation error's location.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Name(String),
    Index(u64),
    /// A union's branch (a class name, `typed-dict`, `str`): not a
    /// field, and never shown; kept (bounded) to tell branches apart.
    Tag(String),
}

impl Seg {
    fn of(s: &str) -> Seg {
        if let Ok(i) = s.parse::<u64>() {
            return Seg::Index(i);
        }
        let field = !s.is_empty()
            && s.len() <= MAX_NAME
            && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !matches!(
                s,
                "str" | "int" | "float" | "bool" | "list" | "dict" | "none"
            );
        if field {
            Seg::Name(s.to_owned())
        } else {
            Seg::Tag(s.chars().take(MAX_NAME * 2).collect())
        }
    }
}

/// One validation error: pydantic's `type` and its location.
#[derive(Debug)]
struct Found {
    kind: String,
    loc: Vec<Seg>,
}

/// FastAPI's own answer to an invalid body (sent under a 500 by a
/// handler that caught it).
fn fastapi_json(body: &Value) -> Option<Rejection> {
    let list = body.get("detail")?.as_array()?;
    let found: Vec<Found> = list
        .iter()
        .take(MAX_ERRORS)
        .filter_map(|e| {
            let kind = e.get("type")?.as_str()?.to_owned();
            let loc = e
                .get("loc")?
                .as_array()?
                .iter()
                .map(|s| match s {
                    Value::Number(n) => n.as_u64().map_or(Seg::Tag(n.to_string()), Seg::Index),
                    Value::String(s) => Seg::of(s),
                    other => Seg::Tag(other.to_string().chars().take(MAX_NAME).collect()),
                })
                .collect();
            Some(Found { kind, loc })
        })
        .collect();
    pick(&found)
}

/// FastAPI's text dump of pydantic's errors, as llama-cpp-python sends it:
/// `{'type': 'missing', 'loc': ('body', 'messages', 1, 'content'), …}`.
fn python_dump(message: &str) -> Option<Rejection> {
    if !message.contains("validation error") {
        return None;
    }
    let mut found = Vec::new();
    let mut rest = message;
    while let Some(at) = rest.find("{'type': '") {
        if found.len() == MAX_ERRORS {
            break;
        }
        rest = &rest[at + "{'type': '".len()..];
        let Some(end) = rest.find('\'') else { break };
        let kind = rest[..end].to_owned();
        rest = &rest[end..];
        let Some(open) = rest.strip_prefix("', 'loc': ") else {
            continue;
        };
        let close = match open.chars().next() {
            Some('(') => ')',
            Some('[') => ']',
            _ => continue,
        };
        let Some(stop) = open.find(close) else { break };
        let loc = open[1..stop]
            .split(',')
            .map(|s| s.trim().trim_matches('\''))
            .filter(|s| !s.is_empty())
            .map(Seg::of)
            .collect();
        found.push(Found { kind, loc });
        rest = &open[stop..];
    }
    pick(&found)
}

/// pydantic's own `ValidationError` text: `N validation error(s) for
/// Model`, then each error's dotted location on a line of its own and
/// its message with `[type=…` on the next.
fn pydantic_text(message: &str) -> Option<Rejection> {
    let at = message.find(" validation error")?;
    let header = message[at..].lines().next().unwrap_or_default();
    // The server's own answer failing its model is not the client's.
    if header.contains("Response") {
        return None;
    }
    let mut lines = message[at..].lines().skip(1);
    let mut found = Vec::new();
    while let (Some(loc), Some(msg)) = (lines.next(), lines.next()) {
        if found.len() == MAX_ERRORS || loc.starts_with(' ') {
            break;
        }
        let Some(t) = msg.find("[type=") else { break };
        let kind: String = msg[t + "[type=".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let loc = loc.trim().split('.').map(Seg::of).collect();
        found.push(Found { kind, loc });
        // pydantic adds a line pointing to its docs after each error.
        if lines
            .clone()
            .next()
            .is_some_and(|l| l.trim_start().starts_with("For further"))
        {
            lines.next();
        }
    }
    pick(&found)
}

/// llama.cpp's server reading a request field of the wrong type (or one
/// that is missing): nlohmann::json's `type_error` or `out_of_range`,
/// with the field's JSON pointer when the server was built with
/// diagnostics (`[json.exception.type_error.302] (/messages/1/content)
/// type must be string, but is null`).
fn json_exception(message: &str) -> Option<Rejection> {
    let rest = message.trim_start().strip_prefix("[json.exception.")?;
    let problem = if rest.starts_with("type_error.") {
        "wrong type"
    } else if rest.starts_with("out_of_range.403") {
        "missing"
    } else if rest.starts_with("out_of_range.") {
        "invalid"
    } else {
        return None;
    };
    let after = rest.split_once("] ").map(|x| x.1).unwrap_or_default();
    let field = after
        .strip_prefix("(/")
        .and_then(|p| p.split_once(')'))
        .and_then(|(p, _)| path(&p.split('/').map(Seg::of).collect::<Vec<_>>()));
    Some(Rejection { field, problem })
}

/// Go's `encoding/json` reading the request into the server's struct:
/// the field's path follows the struct's name (`ChatRequest.messages.
/// content`), as JSON names, without indexes.
fn go_unmarshal(message: &str) -> Option<Rejection> {
    let at = message.find("json: cannot unmarshal ")?;
    let rest = &message[at..];
    let field = rest
        .split_once(" into Go struct field ")
        .and_then(|(_, f)| f.split_once(" of type"))
        .and_then(|(f, _)| {
            let segs: Vec<Seg> = f.split('.').skip(1).map(Seg::of).collect();
            path(&segs)
        });
    Some(Rejection {
        field,
        problem: "wrong type",
    })
}

/// The error that says what is wrong. A union (each message may be one
/// of several classes) fails once per branch; a branch whose own tag
/// did not match (a `literal_error` on its `role`, say) is not the one
/// the client meant, so its errors are set aside when another is left.
fn pick(found: &[Found]) -> Option<Rejection> {
    // FastAPI checks a handler's answer too: an error located in the
    // `response` is the server's own.
    let found: Vec<&Found> = found
        .iter()
        .filter(|f| !matches!(f.loc.first(), Some(Seg::Name(n)) if n == "response"))
        .collect();
    let parent = |f: &Found| f.loc[..f.loc.len().saturating_sub(1)].to_vec();
    let wrong: Vec<Vec<Seg>> = found
        .iter()
        .copied()
        .filter(|f| f.kind == "literal_error" && f.loc.iter().any(|s| matches!(s, Seg::Tag(_))))
        .map(&parent)
        .collect();
    let best = *found
        .iter()
        .find(|f| !wrong.contains(&parent(f)))
        .or_else(|| found.first())?;
    Some(Rejection {
        field: path(&best.loc),
        problem: problem(&best.kind),
    })
}

/// `messages[1].content` from a location, without FastAPI's leading
/// `body` and without union tags; `None` when nothing is left or it is
/// too long.
fn path(loc: &[Seg]) -> Option<String> {
    let loc = match loc.first() {
        Some(Seg::Name(n)) if n == "body" => &loc[1..],
        _ => loc,
    };
    let kept: Vec<&Seg> = loc.iter().filter(|s| !matches!(s, Seg::Tag(_))).collect();
    if kept.is_empty() || kept.len() > MAX_SEGMENTS {
        return None;
    }
    let mut out = String::new();
    for s in kept {
        match s {
            Seg::Name(n) if out.is_empty() => out.push_str(n),
            Seg::Name(n) => {
                out.push('.');
                out.push_str(n);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Tag(_) => {}
        }
    }
    Some(out)
}

/// A short, fixed text for pydantic's error type.
fn problem(kind: &str) -> &'static str {
    match kind {
        "missing" => "missing",
        "extra_forbidden" => "not allowed",
        "literal_error" | "enum" => "not an allowed value",
        "json_invalid" | "json_type" => "invalid JSON",
        k if k.ends_with("_type") || k == "is_instance_of" => "wrong type",
        k if k.starts_with("greater_than")
            || k.starts_with("less_than")
            || k.contains("too_short")
            || k.contains("too_long") =>
        {
            "out of range"
        }
        _ => "invalid",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use serde_json::json;

    use super::*;

    fn read(status: u16, body: &str) -> Option<Rejection> {
        let v: Option<Value> = serde_json::from_str(body).ok();
        recognise(status, v.as_ref(), body)
    }

    fn said(field: &str, problem: &'static str) -> Option<Rejection> {
        Some(Rejection {
            field: Some(field.into()),
            problem,
        })
    }

    /// llama-cpp-python 0.3.x's answer to an assistant turn with
    /// `"content": null` (as the mock's `rejects_null_content` writes it,
    /// measured against the real server): seven errors, one per union
    /// branch, and the one that matters is the assistant branch's.
    #[test]
    fn llama_cpp_pythons_dump_names_the_field_of_the_branch_that_applies() {
        let message = "7 validation errors:\n  \
{'type': 'literal_error', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestSystemMessage', 'role'), 'msg': \"Input should be 'system'\", 'input': 'assistant', 'ctx': {'expected': \"'system'\"}}\n  \
{'type': 'literal_error', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestUserMessage', 'role'), 'msg': \"Input should be 'user'\", 'input': 'assistant', 'ctx': {'expected': \"'user'\"}}\n  \
{'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}\n  \
{'type': 'literal_error', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestToolMessage', 'role'), 'msg': \"Input should be 'tool'\", 'input': 'assistant', 'ctx': {'expected': \"'tool'\"}}\n  \
{'type': 'missing', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestToolMessage', 'tool_call_id'), 'msg': 'Field required', 'input': {'role': 'assistant', 'content': None}}\n\n  \
File \"/usr/lib/python3.11/site-packages/llama_cpp/server/app.py\", line 376, in create_chat_completion";
        let body = json!({"error": {"message": message, "type": "internal_server_error", "param": null, "code": null}});
        let r = read(500, &body.to_string());
        assert_eq!(r, said("messages[1].content", "wrong type"));
        // The same body under another status is not read so.
        assert_eq!(read(502, &body.to_string()), None);
        assert_eq!(read(503, &body.to_string()), None);
    }

    #[test]
    fn a_single_missing_field_and_a_list_location() {
        let body = json!({"error": {"message": "1 validation error:\n  {'type': 'missing', 'loc': ['body', 'messages'], 'msg': 'Field required', 'input': {}}"}});
        assert_eq!(read(500, &body.to_string()), said("messages", "missing"));
        // A role no branch takes: every branch's tag failed, so the first.
        let body = json!({"error": {"message": "2 validation errors:\n  {'type': 'literal_error', 'loc': ('body', 'messages', 0, 'ChatCompletionRequestSystemMessage', 'role'), 'msg': \"Input should be 'system'\", 'input': 'bot'}\n  {'type': 'literal_error', 'loc': ('body', 'messages', 0, 'ChatCompletionRequestUserMessage', 'role'), 'msg': \"Input should be 'user'\", 'input': 'bot'}"}});
        assert_eq!(
            read(500, &body.to_string()),
            said("messages[0].role", "not an allowed value")
        );
    }

    #[test]
    fn fastapis_json_detail() {
        let body = r#"{"detail": [{"type": "missing", "loc": ["body", "messages", 1, "content"], "msg": "Field required", "input": {"role": "assistant"}}]}"#;
        assert_eq!(read(500, body), said("messages[1].content", "missing"));
        let body = r#"{"detail": [{"type": "int_parsing", "loc": ["body", "max_tokens"], "msg": "Input should be a valid integer", "input": "lots"}]}"#;
        assert_eq!(read(500, body), said("max_tokens", "invalid"));
    }

    #[test]
    fn pydantics_own_text_as_vllm_passes_it_on() {
        let message = "1 validation error for ChatCompletionRequest\nmessages.1.content\n  Input should be a valid string [type=string_type, input_value=None, input_type=NoneType]\n    For further information visit https://errors.pydantic.dev/2.9/v/string_type";
        let body = json!({"object": "error", "message": message, "type": "InternalServerError", "param": null, "code": 500});
        assert_eq!(
            read(500, &body.to_string()),
            said("messages[1].content", "wrong type")
        );
        let message = "2 validation errors for ChatCompletionRequest\ntemperature\n  Input should be less than or equal to 2 [type=less_than_equal, input_value=9, input_type=int]\nmessages\n  Field required [type=missing, input_value={}, input_type=dict]";
        let body =
            json!({"object": "error", "message": message, "type": "BadRequestError", "code": 400});
        assert_eq!(
            read(500, &body.to_string()),
            said("temperature", "out of range")
        );
    }

    #[test]
    fn llama_cpps_json_exceptions() {
        let body = r#"{"error":{"code":500,"message":"[json.exception.type_error.302] type must be string, but is null","type":"server_error"}}"#;
        assert_eq!(
            read(500, body),
            Some(Rejection {
                field: None,
                problem: "wrong type"
            })
        );
        let body = r#"{"error":{"code":500,"message":"[json.exception.type_error.302] (/messages/1/content) type must be string, but is null","type":"server_error"}}"#;
        assert_eq!(read(500, body), said("messages[1].content", "wrong type"));
        let body = r#"{"error":{"code":500,"message":"[json.exception.out_of_range.403] key 'role' not found","type":"server_error"}}"#;
        assert_eq!(read(500, body).unwrap().problem, "missing");
    }

    #[test]
    fn gos_json_decoder_as_ollama_answers() {
        let body = r#"{"error":"json: cannot unmarshal number into Go struct field ChatRequest.messages.content of type string"}"#;
        assert_eq!(read(500, body), said("messages.content", "wrong type"));
        let body = r#"{"error":{"message":"json: cannot unmarshal array into Go value of type api.ChatRequest","type":"api_error"}}"#;
        assert_eq!(
            read(500, body),
            Some(Rejection {
                field: None,
                problem: "wrong type"
            })
        );
    }

    #[test]
    fn a_body_that_calls_itself_a_client_error() {
        let body = r#"{"object":"error","message":"Invalid 'content' type","type":"BadRequestError","param":null,"code":400}"#;
        assert_eq!(
            read(500, body),
            Some(Rejection {
                field: None,
                problem: "invalid"
            })
        );
        let body = r#"{"error":{"message":"bad","type":"invalid_request_error"}}"#;
        assert!(read(500, body).is_some());
    }

    #[test]
    fn a_servers_own_failure_is_not_a_rejection() {
        for body in [
            r#"{"error":{"code":500,"message":"llama_decode returned -1","type":"server_error"}}"#,
            r#"{"error":{"message":"CUDA out of memory","type":"internal_server_error"}}"#,
            r#"{"object":"error","message":"Engine loop has died","type":"InternalServerError","code":500}"#,
            "Internal Server Error",
            r#"{"error":{"code":500,"message":"[json.exception.parse_error.101] parse error at line 1","type":"server_error"}}"#,
            "",
            // The server's own answer failing validation.
            r#"{"detail": [{"type": "string_type", "loc": ["response", "choices", 0, "message", "content"], "msg": "x"}]}"#,
            r#"{"error":{"message":"1 validation error:\n  {'type': 'missing', 'loc': ('response', 'id'), 'msg': 'Field required'}"}}"#,
            r#"{"error":{"message":"1 validation error for ChatCompletionResponse\nchoices.0.message\n  Field required [type=missing, input_value={}, input_type=dict]"}}"#,
        ] {
            assert_eq!(read(500, body), None, "{body}");
        }
    }

    #[test]
    fn only_field_names_and_indexes_reach_the_path() {
        // Values, class names and anything else that is not a field name
        // are dropped; an over-long path is not given at all.
        let body = r#"{"detail": [{"type": "string_type", "loc": ["body", "messages", 2, "Sk-Secret/../etc", "content"], "msg": "x", "input": "sk-abc"}]}"#;
        assert_eq!(read(500, body), said("messages[2].content", "wrong type"));
        let deep: Vec<Value> = (0..12).map(|i| json!(format!("f{i}"))).collect();
        let body = json!({"detail": [{"type": "missing", "loc": deep}]});
        assert_eq!(
            read(500, &body.to_string()),
            Some(Rejection {
                field: None,
                problem: "missing"
            })
        );
    }
}
