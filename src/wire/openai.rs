//! OpenAI's own endpoints as [`Endpoint`] values: chat completions,
//! legacy completions and embeddings. Their whole bodies and `[DONE]`
//! streams are read by [`super::inspect`], their assistant output by
//! [`super::output`]; a request's input is its `prompt` or `input`.

use serde_json::{Map, Value};

use super::chunk::read_chunk;
use super::endpoint::{Endpoint, Events, Family, Protocol, latest_usage};
use super::inspect::{inspect_completion, inspect_embeddings};
use super::output::AssistantOutput;
use super::request::text_len;

impl Endpoint {
    /// `POST /v1/chat/completions`.
    pub const CHAT: Endpoint = Endpoint(&Protocol {
        name: "chat",
        title: "chat completions",
        path: "/chat/completions",
        ..COMPLETIONS
    });

    /// `POST /v1/completions` (legacy completions).
    pub const COMPLETIONS: Endpoint = Endpoint(&COMPLETIONS);

    /// `POST /v1/embeddings`.
    pub const EMBEDDINGS: Endpoint = Endpoint(&Protocol {
        name: "embeddings",
        title: "Embeddings",
        path: "/embeddings",
        whole: inspect_embeddings,
        ..COMPLETIONS
    });
}

const COMPLETIONS: Protocol = Protocol {
    name: "completions",
    title: "Completions",
    path: "/completions",
    family: Family::OpenAi,
    events: Events::Done,
    whole: inspect_completion,
    event: read_chunk,
    output: AssistantOutput::from_completion,
    input_len: prompt_len,
    usage: latest_usage,
};

/// The bytes of a request's `prompt` and `input` (legacy completions,
/// embeddings), for a usage estimate.
fn prompt_len(body: &Map<String, Value>) -> usize {
    ["prompt", "input"]
        .iter()
        .filter_map(|k| body.get(*k))
        .map(text_len)
        .sum()
}
