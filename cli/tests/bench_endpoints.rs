//! `fleetbench bench` against endpoints as users run them: a real `llama-server` started with
//! `--api-key` (refused without the key, measured with it, from `OPENAI_API_KEY`, `--api-key` or
//! an `Authorization` `--header`), and the same server behind a TLS-terminating proxy on
//! loopback whose certificate is trusted through `--ca-cert` only.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

const KEY: &str = "sk-fleetbench-test";
const PROMPTS: u64 = 4;
const OUTPUT_LEN: u64 = 8;

struct Llama(Child);

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn health(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200")
}

fn start_llama(log: &Path) -> (Llama, u16) {
    let ll = fleetbench_testkit::llama_cpp();
    let port = fleetbench_testkit::free_port();
    let child = Command::new(&ll.server)
        .arg("-m")
        .arg(&ll.model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-c", "2048", "-np", "2", "--api-key", KEY])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("spawn llama-server");
    let guard = Llama(child);
    let t = Instant::now();
    while !health(port) {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "llama-server not healthy within 120 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    (guard, port)
}

/// A TLS-terminating proxy on loopback: TLS from the client, plain TCP to `upstream`. Runs on
/// its own runtime thread for the test's life.
fn start_tls_proxy(cert: &Path, key: &Path, upstream: u16) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("cert")
        .collect::<Result<_, _>>()
        .expect("cert");
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends here, as it should.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut up) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
    });
    port
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
