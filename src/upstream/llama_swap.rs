//! The llama-swap warm-state probe: `GET /running` lists the models that
//! are loaded; a model is warm when it is there in state `ready`. The probe
//! is short (200 ms) and a failure reads as "unknown", never as an error.

use std::time::Duration;

use serde::Deserialize;

use crate::labels::Warm;

const PROBE_TIMEOUT: Duration = Duration::from_millis(200);

pub struct LlamaSwapProbe {
    client: reqwest::Client,
    url: String,
}

#[derive(Deserialize)]
struct Running {
    #[serde(default)]
    running: Vec<Process>,
}

#[derive(Deserialize)]
struct Process {
    model: String,
    #[serde(default)]
    state: Option<String>,
}

impl LlamaSwapProbe {
    pub fn new(client: reqwest::Client, base: &str) -> Self {
        LlamaSwapProbe {
            client,
            url: format!("{base}/running"),
        }
    }

    pub async fn warm(&self, model: &str) -> Warm {
        let resp = self
            .client
            .get(&self.url)
            .timeout(PROBE_TIMEOUT)
            .send()
            .await;
        let Ok(resp) = resp else {
            return Warm::Unknown;
        };
        match resp.json::<Running>().await {
            Ok(r) => warm_in(&r, model),
            Err(_) => Warm::Unknown,
        }
    }
}

fn warm_in(r: &Running, model: &str) -> Warm {
    let loaded = r
        .running
        .iter()
        .any(|p| p.model == model && p.state.as_deref().is_none_or(|s| s == "ready"));
    if loaded { Warm::Yes } else { Warm::No }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_llama_swap_running() {
        let r: Running = serde_json::from_str(
            r#"{"running":[{"model":"qwen","state":"ready","cmd":"x","ttl":0}]}"#,
        )
        .unwrap();
        assert_eq!(warm_in(&r, "qwen"), Warm::Yes);
        assert_eq!(warm_in(&r, "gemma"), Warm::No);
        let r: Running =
            serde_json::from_str(r#"{"running":[{"model":"qwen","state":"starting"}]}"#).unwrap();
        assert_eq!(warm_in(&r, "qwen"), Warm::No);
    }
}
