//! The serving path `conclave serve` takes: worker threads, each with a
//! runtime and a listening socket of its own on one port
//! (`server::Listeners`), in front of a plain-http upstream (each worker's
//! own upstream connections). Run in-process, so the test sees it end.

use std::time::Duration;

use conclave::{Control, Listen};
use tokio::sync::mpsc;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_one_port_answer_every_connection_and_end_when_told() {
    let mock = Srv::mock(
        "[upstreams.sim]\nkind = \"mock\"\n\n[upstreams.sim.models.m]\nreply = { text = \"the answer\" }\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let toml = front_of(&mock.v1(), &["m"], "").replace("{dir}", &dir.path().display().to_string());
    let config = conclave::config::parse_file(
        &toml,
        &dir.path().join("conclave.toml"),
        &|_| None,
        &conclave::strategy::ALL,
    )
    .unwrap();
    let prepared = conclave::prepare(config).unwrap();
    let workers = conclave::server::Listeners::bind("127.0.0.1:0".parse().unwrap(), 3).unwrap();
    let addr = workers.local_addr();
    let (tx, rx) = mpsc::unbounded_channel();
    let run = tokio::spawn(prepared.run(Listen::Workers(workers), None, rx));
    // A connection each (the kernel spreads them over the workers), and a
    // second request on each.
    let answers = futures::future::join_all((0..24).map(|i| async move {
        let client = reqwest::Client::new();
        let mut out = Vec::new();
        for turn in 0..2 {
            let r = client
                .post(format!("http://{addr}/v1/chat/completions"))
                .json(&chat("m", &format!("question {i}.{turn}")))
                .send()
                .await
                .unwrap();
            out.push((r.status().as_u16(), r.text().await.unwrap()));
        }
        out
    }))
    .await;
    for (status, text) in answers.into_iter().flatten() {
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("the answer"), "{text}");
    }
    assert_eq!(mock.asked("m").await.len(), 48);
    tx.send(Control::Shutdown).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), run).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "the gateway did not end after Shutdown"
    );
    // Every worker's socket is closed: the port can be bound again.
    assert!(std::net::TcpListener::bind(addr).is_ok());
}
