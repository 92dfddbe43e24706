//! What servers say about a model's context window, read from their
//! answers: llama.cpp's `GET /props`, the metadata some servers put in
//! `GET /v1/models` (vLLM's `max_model_len`), and Ollama's `POST
//! /api/show`. Only the window the server runs with counts, never
//! the length the model was trained for (`n_ctx_train`), which a server
//! may cap far lower.

use std::collections::HashMap;

use serde_json::Value;

use crate::model::MAX_CONTEXT_WINDOW;

/// The fields of a `/v1/models` entry that give the window the server
/// serves, most specific first: vLLM's `max_model_len`, LM Studio's
/// `loaded_context_length`, then `context_window` (Groq),
/// `context_length` (OpenRouter, Together), `max_context_length`, and
/// `meta.n_ctx`.
const MODEL_FIELDS: [&str; 6] = [
    "/max_model_len",
    "/loaded_context_length",
    "/context_window",
    "/context_length",
    "/max_context_length",
    "/meta/n_ctx",
];

/// A window as a server wrote it: a positive integer no larger than
/// [`MAX_CONTEXT_WINDOW`].
fn window(v: &Value) -> Option<u64> {
    v.as_u64().filter(|n| (1..=MAX_CONTEXT_WINDOW).contains(n))
}

/// llama.cpp's `/props`: `default_generation_settings.n_ctx` (a slot's
/// window), or a top-level `n_ctx` in some versions.
pub fn props(body: &Value) -> Option<u64> {
    body.pointer("/default_generation_settings/n_ctx")
        .and_then(window)
        .or_else(|| body.get("n_ctx").and_then(window))
}

/// Ollama's `POST /api/show`: the `num_ctx` its `parameters` (one
/// `name value` a line) set, which is what it serves with, else its
/// `model_info`'s `<arch>.context_length` (the model's own length: a
/// prompt beyond `num_ctx` is cut short by Ollama, not refused).
pub fn ollama_show(body: &Value) -> Option<u64> {
    let num_ctx = body
        .get("parameters")
        .and_then(Value::as_str)
        .and_then(|p| {
            p.lines().find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("num_ctx")).then(|| w.next())?
            })
        })
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| (1..=MAX_CONTEXT_WINDOW).contains(n));
    num_ctx.or_else(|| {
        body.get("model_info")?
            .as_object()?
            .iter()
            .filter(|(k, _)| k.ends_with(".context_length"))
            .find_map(|(_, v)| window(v))
    })
}

/// The windows a `/v1/models` list gives, by model id.
pub fn models(body: &Value) -> HashMap<String, u64> {
    let Some(data) = body.get("data").and_then(Value::as_array) else {
        return HashMap::new();
    };
    data.iter()
        .filter_map(|m| {
            let id = m.get("id")?.as_str()?;
            let w = MODEL_FIELDS
                .iter()
                .find_map(|f| m.pointer(f).and_then(window))?;
            Some((id.to_owned(), w))
        })
        .collect()
}

/// The window a context-length error states: `maximum context length is
/// N tokens` (llama-cpp-python, vLLM, OpenAI) or `available context size
/// (N tokens)` (llama-server).
pub fn stated(message: &str) -> Option<u64> {
    let at = ["maximum context length is ", "available context size ("]
        .iter()
        .find_map(|says| message.find(says).map(|i| i + says.len()))?;
    let digits: String = message[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .take(12)
        .collect();
    digits
        .parse::<u64>()
        .ok()
        .filter(|n| (1..=MAX_CONTEXT_WINDOW).contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn props_of_llama_cpp_versions() {
        // llama-server (vendored in llama-cpp-python 0.3.36), as it
        // answered (params and the template cut short).
        let v = json!({"default_generation_settings": {"params": {"seed": 4294967295u64, "n_predict": -1},
                       "n_ctx": 512}, "total_slots": 4, "model_alias": "smol", "model_path": "/m.gguf",
                       "chat_template": "…", "build_info": "b0-unknown", "is_sleeping": false});
        assert_eq!(props(&v), Some(512));
        // Other builds: the slot's settings with its id first.
        let v = json!({"default_generation_settings": {"id": 0, "n_ctx": 4096, "params": {"n_predict": -1}},
                       "total_slots": 1, "model_path": "/m.gguf", "chat_template": "…", "build_info": "b5000"});
        assert_eq!(props(&v), Some(4096));
        // Older builds: n_ctx at the top level.
        assert_eq!(props(&json!({"n_ctx": 512, "total_slots": 4})), Some(512));
        // The training length alone says nothing about the server's window.
        assert_eq!(props(&json!({"n_ctx_train": 8192})), None);
        assert_eq!(
            props(&json!({"default_generation_settings": {"n_ctx_train": 8192}})),
            None
        );
        for bad in [
            json!({"default_generation_settings": {"n_ctx": 0}}),
            json!({"n_ctx": -1}),
            json!({"n_ctx": "4096"}),
            json!({"n_ctx": 1.5}),
            json!({"n_ctx": 1_000_000_000_000u64}),
            json!([]),
            json!("props"),
        ] {
            assert_eq!(props(&bad), None, "{bad}");
        }
    }

    #[test]
    fn ollama_show_as_it_answers() {
        // Ollama 0.6: a model with `PARAMETER num_ctx 4096` in its Modelfile.
        let v = json!({"modelfile": "FROM x", "parameters": "num_ctx                        4096\nstop                           \"<|im_end|>\"",
                       "template": "{{ .Prompt }}", "details": {"family": "llama"},
                       "model_info": {"general.architecture": "llama", "llama.context_length": 131072,
                                      "llama.embedding_length": 3072}});
        assert_eq!(ollama_show(&v), Some(4096));
        // Without num_ctx: the model's own length.
        let v = json!({"parameters": "stop \"<|eot_id|>\"", "model_info": {"general.architecture": "qwen2",
                       "qwen2.context_length": 32768, "qwen2.block_count": 28}});
        assert_eq!(ollama_show(&v), Some(32768));
        assert_eq!(
            ollama_show(&json!({"model_info": {"general.architecture": "x"}})),
            None
        );
        for bad in [
            json!({"parameters": "num_ctx 0"}),
            json!({"parameters": "num_ctx lots"}),
            json!({"parameters": "num_ctx 99999999999999"}),
            json!({"model_info": {"llama.context_length": -1}}),
            json!({"model_info": {"llama.context_length": 1_000_000_000_000u64}}),
            json!({"error": "model 'x' not found"}),
        ] {
            assert_eq!(ollama_show(&bad), None, "{bad}");
        }
    }

    #[test]
    fn windows_stated_in_errors() {
        // llama-cpp-python (as conclave passes it on), vLLM, OpenAI.
        for (msg, want) in [
            (
                "This model's maximum context length is 512 tokens. However, you requested 2389 tokens (2373 in the messages, 16 in the completion).",
                Some(512),
            ),
            (
                "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens in the messages",
                Some(32768),
            ),
            (
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
                Some(128000),
            ),
            // llama-server (vendored in llama-cpp-python 0.3.36), as it answered.
            (
                "request (2373 tokens) exceeds the available context size (512 tokens), try increasing it",
                Some(512),
            ),
            (
                "the request exceeds the available context size, try increasing it",
                None,
            ),
            ("maximum context length is 0 tokens", None),
            ("maximum context length is lots", None),
            (
                "maximum context length is 99999999999999999999 tokens",
                None,
            ),
        ] {
            assert_eq!(stated(msg), want, "{msg}");
        }
    }

    #[test]
    fn models_metadata_of_every_server() {
        let v = json!({"object": "list", "data": [
            // vLLM
            {"id": "qwen", "object": "model", "max_model_len": 32768, "root": "Qwen/Qwen2.5-7B"},
            // OpenRouter: context_length (and the provider's).
            {"id": "or/llama", "context_length": 131072, "top_provider": {"context_length": 8192}},
            // Groq
            {"id": "groq", "context_window": 8192},
            // LM Studio: the loaded window wins over the model's largest.
            {"id": "lms", "max_context_length": 32768, "loaded_context_length": 4096},
            // llama-server, as it answered (its window and its training length).
            {"id": "smol", "aliases": ["smol"], "tags": [], "object": "model", "created": 1795524918,
             "owned_by": "llamacpp", "meta": {"vocab_type": 2, "n_vocab": 49152, "n_ctx": 512,
             "n_ctx_train": 8192, "n_embd": 576, "n_params": 134515008, "size": 96576768, "ftype": "Q4_1"}},
            // Only the training length, which is not the window.
            {"id": "trained", "meta": {"n_ctx_train": 8192, "n_vocab": 49152}},
            // OpenAI: nothing.
            {"id": "gpt-4o", "object": "model", "owned_by": "system"},
            {"max_model_len": 100},
            {"id": "zero", "max_model_len": 0},
        ]});
        let got = models(&v);
        let want: HashMap<String, u64> = [
            ("qwen", 32768),
            ("or/llama", 131072),
            ("groq", 8192),
            ("lms", 4096),
            ("smol", 512),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(got, want);
        assert!(models(&json!({"models": []})).is_empty());
        assert!(models(&json!({"data": "x"})).is_empty());
    }
}
