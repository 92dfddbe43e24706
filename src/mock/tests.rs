//! The simulator's own answers, whole and streamed.

use super::*;
use futures::StreamExt;

async fn collect(r: MockResponse) -> (u16, String) {
    let mut out = Vec::new();
    let mut body = r.body;
    while let Some(Ok(b)) = body.next().await {
        out.extend_from_slice(&b);
    }
    (r.status, String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn echo_whole_and_streamed() {
    let sim = Arc::new(Simulator::new(
        IndexMap::new(),
        SwapSim::default(),
        Quirks::default(),
        true,
    ));
    let (status, body) = collect(
        sim.respond(
            Endpoint::CHAT,
            br#"{"model":"m","messages":[{"role":"user","content":"hi there"}]}"#,
            None,
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "hi there");
    assert_eq!(v["usage"]["completion_tokens"], 2);

    let (_, body) = collect(
        sim.respond(
            Endpoint::CHAT,
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"a b c"}]}"#,
            None,
            None,
        )
        .await,
    )
    .await;
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
    // role, 3 tokens, finish, usage, [DONE]
    assert_eq!(events.len(), 7, "{body}");
    assert!(events[5].contains("\"choices\":[]"));
    assert_eq!(events[6], "data: [DONE]");
    assert_eq!(sim.running().as_deref(), Some("m"));
    assert_eq!(sim.stats.completed.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn the_request_log_is_bounded_in_bytes() {
    let sim = Arc::new(Simulator::new(
        IndexMap::new(),
        SwapSim::default(),
        Quirks::default(),
        true,
    ));
    // Forty 7 MB bodies: the log keeps what fits in its byte bound, the
    // newest last.
    let big = "x".repeat(7 << 20);
    for i in 0..40 {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": big}], "seed": i});
        sim.record("m", Heard::default(), &body);
    }
    let kept = sim.recorded();
    let bytes: u64 = kept
        .iter()
        .map(|r| crate::wire::billing::json_len(&r.body))
        .sum();
    assert!(bytes <= RECORDED_BYTES, "{bytes}");
    assert_eq!(kept.len(), (RECORDED_BYTES / (7 << 20)) as usize);
    assert_eq!(kept.last().unwrap().body["seed"], 39);
    // One body over the whole bound is kept as a note of its size.
    let huge = json!({"input": "y".repeat((RECORDED_BYTES + 1) as usize)});
    sim.record("m", Heard::default(), &huge);
    let last = sim.recorded().pop().unwrap();
    assert!(last.body["omitted_bytes"].as_u64().unwrap() > RECORDED_BYTES);
    // Small ones are still bounded by count.
    sim.clear_recorded();
    for _ in 0..RECORDED + 5 {
        sim.record("m", Heard::default(), &json!({"model": "m"}));
    }
    assert_eq!(sim.recorded().len(), RECORDED);
}

#[tokio::test]
async fn a_new_request_ends_the_stream_in_flight_without_a_finish_reason() {
    let sim = Arc::new(Simulator::new(
        IndexMap::new(),
        SwapSim::default(),
        Quirks::new(&[Quirk::InterruptsOnNewRequest]),
        true,
    ));
    let ask = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"a b c"}]}"#;
    let mut first = sim.respond(Endpoint::CHAT, ask, None, None).await;
    // Its role chunk went out; then another request arrives.
    let role = first.body.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&role).contains("\"role\""));
    let second = sim.respond(Endpoint::CHAT, ask, None, None).await;
    let (_, rest) = collect(first).await;
    assert_eq!(rest, "data: [DONE]\n\n");
    // The second, alone, answers whole.
    let (_, whole) = collect(second).await;
    assert!(whole.contains("\"finish_reason\":\"stop\""), "{whole}");
    assert!(whole.ends_with("data: [DONE]\n\n"), "{whole}");
    // Without the quirk, nothing is cut.
    let calm = Arc::new(Simulator::new(
        IndexMap::new(),
        SwapSim::default(),
        Quirks::default(),
        true,
    ));
    let mut first = calm.respond(Endpoint::CHAT, ask, None, None).await;
    first.body.next().await.unwrap().unwrap();
    let _second = calm.respond(Endpoint::CHAT, ask, None, None).await;
    let (_, rest) = collect(first).await;
    assert!(rest.contains("\"finish_reason\":\"stop\""), "{rest}");
}
