//! Fixed-latency mode against the real binary: timings measured by a plain client, token and
//! usage counts, /tokenize, endpoints.

mod common;

use std::time::Duration;

use common::{Sim, median, ms};

const REQ: &str = r#"{"prompt":"one two three four five","max_tokens":20,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}"#;

#[test]
fn streamed_tokens_follow_injected_deadlines() {
    let sim = Sim::ready(&["--ttft-ms", "50", "--itl-ms", "5"]);
    let mut ttfts = Vec::new();
    let mut itls = Vec::new();
    for _ in 0..5 {
        let r = sim.stream("/v1/completions", REQ);
        assert_eq!(r.status, 200);
        let toks = r.token_indices();
        assert_eq!(toks.len(), 20, "events: {:?}", r.events);
        for (k, &i) in toks.iter().enumerate() {
            // Never early: token k is due at arrival + 50 ms + k * 5 ms, and the arrival is after
            // the client sent the request.
            let at = ms(r.times[i] - r.sent);
            assert!(
                at >= 50.0 + 5.0 * k as f64 - 0.05,
                "token {k} at {at:.3} ms"
            );
        }
        ttfts.push(ms(r.times[toks[0]] - r.sent));
        for w in toks.windows(2) {
            itls.push(ms(r.times[w[1]] - r.times[w[0]]));
        }
        // Absolute deadlines: the last token is not later than the sum of delays plus slack,
        // so per-token lateness does not accumulate.
        let last = ms(r.times[*toks.last().unwrap()] - r.sent);
        assert!(
            last < 50.0 + 5.0 * 19.0 + 25.0,
            "last token at {last:.3} ms"
        );
    }
    let ttft = median(ttfts);
    let itl = median(itls);
    assert!((50.0..56.0).contains(&ttft), "median TTFT {ttft:.3} ms");
    assert!((4.0..6.0).contains(&itl), "median ITL {itl:.3} ms");
}

#[test]
fn usage_counts_and_stream_shape() {
    let sim = Sim::ready(&[
        "--ttft-ms",
        "0",
        "--itl-ms",
        "0",
        "--stream-writes",
        "coalesced",
    ]);
    let r = sim.stream("/v1/completions", REQ);
    assert_eq!(
        r.events.last().unwrap(),
        "data: [DONE]".strip_prefix("data: ").unwrap()
    );
    let usage = r.json(r.events.len() - 2);
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["prompt_tokens"], 5);
    assert_eq!(usage["usage"]["completion_tokens"], 20);
    assert_eq!(usage["usage"]["total_tokens"], 25);
    let fin = r.json(r.events.len() - 3);
    assert_eq!(fin["choices"][0]["finish_reason"], "length");

    // Chat, continuous usage on every chunk.
    let body = r#"{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say hi"}],"max_tokens":7,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#;
    let r = sim.stream("/v1/chat/completions", body);
    let toks = r.token_indices();
    assert_eq!(toks.len(), 7);
    for (k, &i) in toks.iter().enumerate() {
        let v = r.json(i);
        assert_eq!(v["usage"]["completion_tokens"], k as u64 + 1);
        assert_eq!(v["usage"]["prompt_tokens"], 4);
        assert_eq!(v["object"], "chat.completion.chunk");
    }

    // Without usage requested there is no usage chunk.
    let r = sim.stream(
        "/v1/completions",
        r#"{"prompt":"x","max_tokens":3,"ignore_eos":true,"stream":true}"#,
    );
    assert!(
        r.events.iter().all(|e| !e.contains("\"usage\"")),
        "{:?}",
        r.events
    );
    assert_eq!(r.token_indices().len(), 3);

    // Non-streamed.
    let (st, body) = sim.post(
        "/v1/completions",
        r#"{"prompt":"a b c","max_tokens":9,"ignore_eos":true}"#,
    );
    assert_eq!(st, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 9);
    assert_eq!(
        v["choices"][0]["text"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count(),
        9
    );
}

#[test]
fn without_ignore_eos_some_requests_stop_early() {
    let sim = Sim::ready(&["--ttft-ms", "0", "--itl-ms", "0", "--seed", "3"]);
    let mut early = 0;
    for _ in 0..40 {
        let (_, body) = sim.post("/v1/completions", r#"{"prompt":"a","max_tokens":50}"#);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let n = v["usage"]["completion_tokens"].as_u64().unwrap();
        let reason = v["choices"][0]["finish_reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!((1..=50).contains(&n));
        if reason == "stop" {
            assert!(n < 50);
            early += 1;
        } else {
            assert_eq!((n, reason.as_str()), (50, "length"));
        }
    }
    assert!((3..30).contains(&early), "{early} of 40 stopped early");
}

#[test]
fn tokenize_models_metrics_and_errors() {
    let sim = Sim::ready(&["--ttft-ms", "1", "--itl-ms", "0", "--model", "my/model"]);
    let (st, body) = sim.post("/tokenize", r#"{"prompt":"the quick  brown fox"}"#);
    assert_eq!(st, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["count"], 4);
    assert_eq!(v["tokens"].as_array().unwrap().len(), 4);
    let (_, body) = sim.post("/tokenize", r#"{"content":"a b"}"#);
    assert!(body.contains("\"count\":2"), "{body}");
    let (_, body) = sim.post(
        "/tokenize",
        r#"{"messages":[{"role":"user","content":"a b"},{"role":"assistant","content":"c"}]}"#,
    );
    assert!(body.contains("\"count\":3"), "{body}");

    let (_, body) = sim.get("/v1/models");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"][0]["id"], "my/model");

    let (st, body) = sim.post("/v1/completions", r#"{"max_tokens":3}"#);
    assert_eq!(st, 400);
    assert!(body.contains("prompt"), "{body}");
    let (st, _) = sim.post("/v1/completions", "not json");
    assert_eq!(st, 400);

    sim.post(
        "/v1/completions",
        r#"{"prompt":"a b","max_tokens":4,"ignore_eos":true}"#,
    );
    let (st, m) = sim.get("/metrics");
    assert_eq!(st, 200);
    assert!(
        m.contains("sglang:generation_tokens_total{model_name=\"my/model\""),
        "{m}"
    );
    assert!(m.contains("sglang:prompt_tokens_total{model_name=\"my/model\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\"} 2"));
    let (_, info) = sim.get("/server_info");
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(v["model_path"], "my/model");
    assert_eq!(v["sim_mode"], "fixed-latency");
    assert_eq!(v["port"], sim.port);
}

#[test]
fn concurrent_streams_keep_their_latency() {
    let sim = Sim::ready(&["--ttft-ms", "30", "--itl-ms", "2"]);
    let handles: Vec<_> = (0..32)
        .map(|_| {
            let port = sim.port;
            std::thread::spawn(move || {
                let r = common::stream_to(
                    port,
                    "/v1/completions",
                    r#"{"prompt":"a","max_tokens":50,"ignore_eos":true,"stream":true}"#,
                );
                let toks = r.token_indices();
                assert_eq!(toks.len(), 50);
                (
                    ms(r.times[toks[0]] - r.sent),
                    ms(r.times[toks[49]] - r.sent),
                )
            })
        })
        .collect();
    let res: Vec<(f64, f64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for (ttft, last) in &res {
        assert!(*ttft >= 30.0 - 0.05, "TTFT {ttft}");
        assert!(*last >= 30.0 + 98.0 - 0.05, "last {last}");
    }
    let ttft = median(res.iter().map(|r| r.0).collect());
    assert!(ttft < 40.0, "median TTFT at 32 streams {ttft:.2} ms");
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn stream_interval_puts_several_tokens_in_one_event() {
    let sim = Sim::ready(&["--ttft-ms", "5", "--itl-ms", "1", "--stream-interval", "4"]);
    let body = r#"{"prompt":"a","max_tokens":10,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#;
    let r = sim.stream("/v1/completions", body);
    let toks = r.token_indices();
    let words: Vec<usize> = toks
        .iter()
        .map(|&i| {
            r.json(i)["choices"][0]["text"]
                .as_str()
                .unwrap()
                .split_whitespace()
                .count()
        })
        .collect();
    assert_eq!(words, vec![4, 4, 2]);
    let counts: Vec<u64> = toks
        .iter()
        .map(|&i| r.json(i)["usage"]["completion_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, vec![4, 8, 10]);
    // The first event waits for its fourth token: 5 ms + 3 x 1 ms.
    assert!(ms(r.times[toks[0]] - r.sent) >= 8.0 - 0.05);
}
