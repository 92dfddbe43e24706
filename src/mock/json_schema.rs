//! The `rejects_json_schema` quirk: llama-cpp-python (0.3.x) types
//! `response_format` as `{"type": "text" | "json_object", "schema"?}`, so
//! a `"type": "json_schema"` (OpenAI's structured outputs; any other type
//! too) fails pydantic's validation, and the server answers it, whole or
//! streamed, with HTTP 500 and the error's dump followed by a traceback
//! line with the server's file path, as it answers every validation error.

use serde_json::Value;

use super::null_content::py;
use super::{MockResponse, Quirk, Quirks};

/// Where the traceback says the error was raised.
const TRACEBACK: &str = "  File \"/usr/lib/python3.11/site-packages/llama_cpp/server/app.py\", \
line 376, in create_chat_completion\n    POST /v1/chat/completions";

/// The 500 a request whose `response_format` is neither `text` nor
/// `json_object` gets, if the simulator plays this quirk.
pub(super) fn refusal(quirks: &Quirks, req: &Value) -> Option<MockResponse> {
    if !quirks.has(Quirk::RejectsJsonSchema) {
        return None;
    }
    let kind = req.get("response_format")?.get("type")?;
    if matches!(kind.as_str(), Some("text" | "json_object")) {
        return None;
    }
    let message = format!(
        "1 validation error:\n  {{'type': 'literal_error', 'loc': ('body', 'response_format', \
         'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': {}, 'ctx': \
         {{'expected': \"'text' or 'json_object'\"}}}}\n\n{TRACEBACK}",
        py(kind)
    );
    Some(super::null_content::validation_500(&message))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use futures::StreamExt;
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_json_schema_response_format_gets_llama_cpp_pythons_500() {
        let quirks = Quirks::new(&[Quirk::RejectsJsonSchema]);
        let req = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}});
        let resp = refusal(&quirks, &req).unwrap();
        assert_eq!(resp.status, 500);
        let mut body = resp.body;
        let v: Value = serde_json::from_slice(&body.next().await.unwrap().unwrap()).unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with("1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "), "{msg}");
        assert!(msg.ends_with(TRACEBACK), "{msg}");
        // `json_object`, `text`, no `response_format`, and a server
        // without the quirk all pass.
        for ok in ["json_object", "text"] {
            let mut r = req.clone();
            r["response_format"] = json!({"type": ok});
            assert!(refusal(&quirks, &r).is_none());
        }
        let mut r = req.clone();
        r.as_object_mut().unwrap().remove("response_format");
        assert!(refusal(&quirks, &r).is_none());
        assert!(refusal(&Quirks::default(), &req).is_none());
    }
}
