//! `fleetbench bench` against endpoints as users run them: a real `llama-server` started with
//! `--api-key` (refused without the key, measured with it, from `OPENAI_API_KEY`, `--api-key` or
//! an `Authorization` `--header`), and the same server behind a TLS-terminating proxy on
//! loopback whose certificate is trusted through `--ca-cert` only.

use std::path::Path;
use std::process::{Command, Output};

use fleetbench_testkit::servers::{LlamaServer, start_tls_proxy};

use serde_json::Value;

const KEY: &str = "sk-fleetbench-test";
const PROMPTS: u64 = 4;
const OUTPUT_LEN: u64 = 8;

fn start_llama(log: &Path) -> (LlamaServer, u16) {
    let server = LlamaServer::start(&["--api-key", KEY], Some(log));
    let port = server.port;
    (server, port)
}

fn bench(url: &str, extra: &[&str], key_env: Option<&str>, json: &Path) -> (Output, String) {
    let mut cmd = Command::new(fleetbench_testkit::workspace_bin("fleetbench"));
    cmd.args(["bench", "--base-url", url, "--concurrency", "2"])
        .args(["--num-prompts", &PROMPTS.to_string()])
        .args(["--input-len", "16", "--output-len", &OUTPUT_LEN.to_string()])
        .args(["--request-timeout", "30s"])
        .arg("--output-json")
        .arg(json)
        .args(extra)
        .env_remove("OPENAI_API_KEY");
    if let Some(k) = key_env {
        cmd.env("OPENAI_API_KEY", k);
    }
    let out = cmd.output().expect("run fleetbench bench");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// Every request completed, with the exact token counts the server's own `usage` reported.
fn assert_measured(json: &Path, text: &str) {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(json).expect(text)).unwrap();
    let l = &doc["levels"][0];
    assert_eq!(l["completed"], PROMPTS, "{text}");
    assert_eq!(l["failed"], 0, "{text}");
    assert_eq!(l["output_tokens"], PROMPTS * OUTPUT_LEN, "{text}");
    assert!(l["ttft_ms"]["p50"].as_f64().unwrap() > 0.0, "{text}");
}

#[test]
fn an_api_key_server_is_refused_without_the_key_and_measured_with_it_over_http_and_https() {
    let dir = tempfile::tempdir().unwrap();
    let (_llama, port) = start_llama(&dir.path().join("llama.log"));
    let http = format!("http://127.0.0.1:{port}");
    let json = dir.path().join("levels.json");

    // No key: every request is refused by the server, and the run says so.
    let (out, text) = bench(&http, &["--model", "m"], None, &json);
    assert!(!out.status.success(), "{text}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect(&text)).unwrap();
    let l = &doc["levels"][0];
    assert_eq!(l["completed"], 0, "{text}");
    assert_eq!(l["failures_by_kind"]["http_401"], PROMPTS, "{text}");

    // The key from the environment, as `vllm bench serve` and the OpenAI clients take it.
    let (out, text) = bench(&http, &[], Some(KEY), &json);
    assert!(out.status.success(), "{text}");
    assert_measured(&json, &text);
    assert!(!text.contains(KEY), "the key is never printed: {text}");

    // A wrong key from the environment yields to the flag.
    let (out, text) = bench(&http, &["--api-key", KEY], Some("wrong"), &json);
    assert!(out.status.success(), "{text}");
    assert_measured(&json, &text);

    // Behind a TLS-terminating proxy whose certificate only the given CA vouches for.
    let certs = fleetbench_support::tls::generate_dev_certs(&dir.path().join("pki"), &[], false)
        .expect("certificates");
    let tls_port = start_tls_proxy(&certs.agent_cert, &certs.agent_key, port);
    let https = format!("https://127.0.0.1:{tls_port}");
    let bearer = format!("Authorization: Bearer {KEY}");
    let ca = certs.ca_cert.to_string_lossy().into_owned();
    let (out, text) = bench(
        &https,
        &[
            "--header",
            &bearer,
            "--header",
            "X-Tenant: bench",
            "--ca-cert",
            &ca,
        ],
        Some("wrong"),
        &json,
    );
    assert!(out.status.success(), "{text}");
    assert_measured(&json, &text);
    // Two streams open two connections before the clock; llama-server closes each after its
    // streamed answer, so each later request reconnects while due, handshake and all: the
    // run says how many and what they cost.
    let note = text
        .lines()
        .find(|l| l.starts_with("connections:"))
        .unwrap_or_else(|| panic!("an https run reports its connection set-up: {text}"));
    let opened: u64 = note["connections: ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{note}"));
    assert!((2..=PROMPTS + 2).contains(&opened), "{note}");
    assert!(note.contains("TLS handshake mean"), "{note}");
    assert!(
        note.contains(&format!(
            "; {} opened for a request already due",
            opened - 2
        )),
        "{note}"
    );

    // Without the CA the certificate is not trusted (the system's store does not hold it):
    // nothing is measured, and the error says why.
    let (out, text) = bench(&https, &["--api-key", KEY], None, &json);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("TLS handshake") && text.contains("certificate"),
        "{text}"
    );
}
