//! The load generator against `fleetbench-sim` in fixed-latency mode: exact counts, accurate
//! latencies, open-loop rate, and queueing that shows up from the intended send time.

mod common;

use std::time::Duration;

use common::{Sim, config};
use fleetbench_loadgen::{Api, Bound, DatasetSpec, Level, Runner};
use tokio_util::sync::CancellationToken;

/// The tests of this file measure time: they run one at a time so they do not load each other.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_counts_are_exact_for_completions_and_chat() {
    let _serial = SERIAL.lock().await;
    let sim = Sim::fixed(2.0, 0.5);
    for api in [Api::Completions, Api::Chat] {
        let mut cfg = config(&sim.url, 37, 23, vec![Level::closed(4)], 20);
        cfg.api = api;
        let runner = Runner::new(cfg).await.expect("runner");
        assert_eq!(runner.shaping().source, "server /tokenize");
        assert_eq!(runner.shaping().inexact, 0);
        let out = runner
            .run_level_detailed(0, &Level::closed(4), None, CancellationToken::new(), true)
            .await;
        let r = &out.report;
        assert_eq!((r.completed, r.failed), (20, 0), "{api:?}: {r:?}");
        assert_eq!(r.output_tokens, 20 * 23, "{api:?}");
        assert_eq!(
            r.itl_ms.count,
            20 * 22,
            "{api:?}: one ITL sample per token after the first"
        );
        assert_eq!(r.ttft_ms.count, 20);
        for rec in &out.records {
            assert!(rec.usage_reported);
            assert_eq!(rec.expected_input_tokens, Some(37));
            if api == Api::Completions {
                assert_eq!(rec.input_tokens, 37, "prompt shaped to exactly 37 tokens");
            } else {
                assert!(
                    rec.input_tokens >= 37,
                    "chat adds its template: {}",
                    rec.input_tokens
                );
            }
            assert_eq!(rec.output_tokens, 23);
            assert_eq!(rec.token_ms.len(), 23, "streamed tokens match usage");
        }
        assert_eq!(r.peak_concurrency, 4);
    }
}

// One client thread, as the bench binary runs: no hand-offs between worker threads.
#[tokio::test(flavor = "current_thread")]
async fn ttft_and_itl_medians_match_the_injected_latencies() {
    let _serial = SERIAL.lock().await;
    // Tokens 100 ms apart and 4-8 per answer keep 512 streams at 5 k tokens/s and 930
    // requests/s: the simulator and the client then need a tenth of a core each, so a busy
    // machine's scheduling delays rarely meet a first token. At 20 ms apart (25.6 k tokens/s,
    // half a core between them) they measured the machine rather than the client
    // (docs/bench.md, "Client cost and accuracy"). One simulator worker: on two cores a second
    // one only adds wake-ups across threads and run-queue waits.
    let (ttft, itl) = (50.0, 100.0);
    let sim = Sim::fixed_with(ttft, itl, &["--workers", "1"]);
    for (c, n) in [(1u32, 24u32), (64, 640), (512, 1536)] {
        let level = Level::closed(c);
        let mut cfg = config(&sim.url, 16, 16, vec![level.clone()], n);
        // Spread output lengths, so that streams do not all end together.
        cfg.dataset = DatasetSpec::Random {
            input_len: 16,
            output_len: 8,
            range_ratio: 0.5,
        };
        cfg.warmup = c.min(32);
        // The streams start one after another over one inter-token gap: a synchronized start
        // sends c requests in one instant, and at 512 streams that first wave (a third of the
        // requests here) waits milliseconds in the client's writes and the server's reads.
        let runner = Runner::new(cfg)
            .await
            .expect("runner")
            .with_ramp_up(Duration::from_secs_f64(itl / 1e3));
        // TTFT counts from the intended send, so it holds the client's queueing (intended to
        // sent: its accounting and send path, reported as `queue_ms`) and the path's wake-ups.
        // The two are checked apart: the median time from the actual send to the first token
        // against the injected TTFT plus a bare timed answer measured just before on the same
        // machine (`timed_answer_floor`), and the queueing median.
        //
        // At 64 and 512 streams neither process idles long: within 0.5 ms of the floor, and
        // queueing under 2 ms (a synchronized first wave of 512 streams queued 4-10 ms,
        // docs/bench.md). At one stream every step of a request follows an idle spell, and
        // what a virtual machine charges for waking from one varies with its host: the same
        // build measured +0.3 ms from the send and 0.05 ms of queueing at 21:40 and +1.6 to
        // +3.3 ms and 1-3 ms of queueing at 22:00 on this machine (ITL p50 then 0.1-0.3 ms late:
        // the simulator's timer wakes late too), while the bare answer stayed at +0.3-0.6 ms
        // and 64 and 512 streams stayed within 0.2 ms; CI's machine failed a 0.5 ms bound at
        // one stream the same way. One stream is held to 5 ms (a clock started at the wrong
        // instant or a first token read late by a parse is off by more), and prints its figures.
        let (bound, queue_bound) = if c == 1 { (5.0, 5.0) } else { (0.5, 2.0) };
        // A busy moment of the machine lands in both, while ITL differences cancel it: a client
        // that is off is off in every attempt, a busy moment is not (with two CPU-bound
        // processes beside it on a 2-core machine, one run at 512 streams gave +4.5, +0.55,
        // +0.12 ms and another +1.7, +0.45 ms; later attempts run only after a miss).
        let mut misses = Vec::new();
        let mut passed = false;
        for _attempt in 0..5 {
            let floor = timed_answer_floor(Duration::from_secs_f64(ttft / 1e3), 24).await;
            let out = runner
                .run_level_detailed(0, &level, None, CancellationToken::new(), true)
                .await;
            let r = &out.report;
            assert_eq!((r.completed, r.failed), (u64::from(n), 0), "c={c}: {r:?}");
            let t50 = r.ttft_ms.get("p50").unwrap();
            let i50 = r.itl_ms.get("p50").unwrap();
            let q50 = r.queue_ms.get("p50").unwrap_or(0.0);
            let mut from_send: Vec<f64> = out
                .records
                .iter()
                .filter_map(|x| Some(x.ttft_ms? - (x.sent_ms? - x.intended_ms)))
                .collect();
            assert!(
                from_send.len() >= n as usize,
                "c={c}: {} records",
                from_send.len()
            );
            from_send.sort_by(f64::total_cmp);
            let s50 = from_send[from_send.len() / 2];
            eprintln!(
                "c={c}: ttft p50 {t50:.3} ms (from the send {s50:.3}, bare timed answer +{floor:.3}), queue p50 {q50:.3} ms, itl p50 {i50:.3} ms, peak {}",
                r.peak_concurrency
            );
            assert!((i50 - itl).abs() <= 0.5, "c={c}: ITL p50 {i50} vs {itl}");
            assert_eq!(r.peak_concurrency, c);
            // Never early: the first token cannot come before the injected delay.
            assert!(s50 >= ttft, "c={c}: first token {s50} ms after the send");
            let excess = s50 - ttft - floor;
            if excess <= bound && q50 <= queue_bound {
                passed = true;
                break;
            }
            misses.push((excess, q50));
        }
        assert!(
            passed,
            "c={c}: per attempt, (TTFT p50 from the send beyond {ttft} ms and the bare timed answer, queueing p50), ms: {misses:?} (at most {bound} and {queue_bound})"
        );
    }
}

/// What this machine adds to one timed answer with no HTTP, no simulator and no load
/// generator: a thread answers each one-byte request on loopback `delay` after reading it (a
/// plain sleep: its 50 us of default timer slack make this floor a little larger, never
/// smaller, than the simulator's timerfd), and a task of the calling runtime times the round
/// trip. The median over `n` round trips, in ms beyond `delay`.
async fn timed_answer_floor(delay: Duration, n: usize) -> f64 {
    use std::io::{Read, Write};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    let answerer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut b = [0u8; 1];
        while s.read_exact(&mut b).is_ok() {
            std::thread::sleep(delay);
            if s.write_all(&b).is_err() {
                break;
            }
        }
    });
    let mut c = tokio::net::TcpStream::connect(addr).await.expect("connect");
    c.set_nodelay(true).expect("nodelay");
    let mut ms = Vec::with_capacity(n);
    let mut b = [0u8; 1];
    for _ in 0..n {
        let t = std::time::Instant::now();
        c.write_all(&[1]).await.expect("write");
        c.read_exact(&mut b).await.expect("read");
        ms.push(t.elapsed().saturating_sub(delay).as_secs_f64() * 1e3);
    }
    drop(c);
    answerer.join().expect("answerer");
    ms.sort_by(f64::total_cmp);
    ms[n / 2]
}

#[tokio::test(flavor = "current_thread")]
async fn a_ramped_closed_loop_starts_its_streams_evenly() {
    let _serial = SERIAL.lock().await;
    // First tokens after 100 ms: every stream has started (0-70 ms) before any request ends, so
    // requests 0-7 are the streams' first ones.
    let sim = Sim::fixed(100.0, 1.0);
    let level = Level::closed(8);
    let runner = Runner::new(config(&sim.url, 8, 2, vec![level.clone()], 16))
        .await
        .expect("runner")
        .with_ramp_up(Duration::from_millis(80));
    let out = runner
        .run_level_detailed(0, &level, None, CancellationToken::new(), true)
        .await;
    assert_eq!((out.report.completed, out.report.failed), (16, 0));
    assert_eq!(out.report.peak_concurrency, 8);
    let recs = out.records;
    let mut starts: Vec<f64> = recs
        .iter()
        .filter(|r| r.index < 8)
        .map(|r| r.intended_ms)
        .collect();
    starts.sort_by(f64::total_cmp);
    for (k, t) in starts.iter().enumerate() {
        let offset = t - starts[0];
        assert!(
            (offset - 10.0 * k as f64).abs() < 1e-3,
            "stream {k} intended {offset} ms after the first"
        );
    }
    for r in &recs {
        let sent = r.sent_ms.expect("sent");
        assert!(
            sent >= r.intended_ms,
            "request {} sent {sent} before it was due at {}",
            r.index,
            r.intended_ms
        );
        // Latency counts from the ramp's instant, not from the level's start.
        assert!(r.ttft_ms.unwrap() >= 100.0 && r.ttft_ms.unwrap() < 1000.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_hits_the_requested_rate() {
    let _serial = SERIAL.lock().await;
    let sim = Sim::fixed(1.0, 0.5);
    let rate = 400.0;
    let runner = Runner::new(config(&sim.url, 8, 4, vec![Level::open(rate)], 2000))
        .await
        .expect("runner");
    let r = runner
        .run_level(0, &Level::open(rate), None, CancellationToken::new())
        .await;
    assert_eq!((r.completed, r.failed), (2000, 0), "{r:?}");
    let achieved = r.requests_per_s;
    assert!(
        (achieved - rate).abs() / rate < 0.02,
        "asked {rate}/s, got {achieved:.2}/s over {:.3} s",
        r.duration_s
    );
    assert!(r.queue_ms.get("p50").unwrap() < 1.0, "{:?}", r.queue_ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_shows_in_ttft_from_the_intended_send_time() {
    let _serial = SERIAL.lock().await;
    let sim = Sim::fixed(5.0, 1.0);
    let rate = 100.0;
    // Two streams at most: a client timing from the actual send would hide all but two of the
    // requests that waited during the stall.
    let level = Level {
        concurrency: Some(2),
        request_rate: Some(rate),
        burstiness: 1.0,
    };
    let mut cfg = config(&sim.url, 8, 4, vec![level.clone()], 200);
    cfg.bound = Bound::Requests(200);
    let runner = Runner::new(cfg).await.expect("runner");
    let stall = Duration::from_millis(600);
    let stopper = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        sim.signal("-STOP");
        tokio::time::sleep(stall).await;
        sim.signal("-CONT");
    };
    let (out, ()) = tokio::join!(
        runner.run_level_detailed(0, &level, None, CancellationToken::new(), true),
        stopper
    );
    let r = &out.report;
    assert_eq!((r.completed, r.failed), (200, 0), "{r:?}");
    let slow: Vec<_> = out
        .records
        .iter()
        .filter(|x| x.ttft_ms.unwrap() > 150.0)
        .collect();
    let queued: Vec<_> = out
        .records
        .iter()
        .filter(|x| x.sent_ms.unwrap() - x.intended_ms > 100.0)
        .collect();
    // About rate × stall = 60 requests were due while the server was stopped.
    assert!(
        slow.len() >= 30,
        "only {} requests show the stall in TTFT",
        slow.len()
    );
    assert!(
        queued.len() >= 25,
        "client-side queueing not reported apart: {}",
        queued.len()
    );
    assert!(
        r.ttft_ms.max >= 450.0,
        "worst TTFT {} ms misses the 600 ms stall",
        r.ttft_ms.max
    );
    assert!(r.queue_ms.max >= 300.0, "{:?}", r.queue_ms);
}

/// Steady state: with a ramp-up and a window, the requests intended during the ramp-up are
/// left out (and counted as such), throughput is the tokens that arrived inside the window
/// over its length (Little's law holds for it), and no figure includes the drain. A level
/// with fewer requests than 4 x its concurrency is marked a burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_window_leaves_out_the_ramp_up_and_the_drain() {
    let _serial = SERIAL.lock().await;
    let sim = Sim::fixed(10.0, 10.0);
    let cfg = config(&sim.url, 16, 16, vec![Level::closed(8)], 100_000);
    let runner = Runner::new(cfg)
        .await
        .expect("runner")
        .with_ramp_up(Duration::from_millis(400))
        .with_window(Some(Duration::from_millis(1600)));
    let r = runner
        .run_level(0, &Level::closed(8), None, CancellationToken::new())
        .await;
    println!("{r:?}");
    assert_eq!(r.failed, 0, "{r:?}");
    assert!(
        r.left_out.ramp_up >= 8,
        "every stream's first request: {r:?}"
    );
    assert_eq!(r.left_out.drain, 0, "nothing is sent after the window");
    assert_eq!(r.ramp_up_s, Some(0.4));
    let w = r.window_s.expect("a window");
    assert!((1.4..=1.6).contains(&w), "window {w}: {r:?}");
    assert_eq!(r.duration_s, w, "throughput divides by the window");
    assert_eq!(
        r.ttft_ms.count, r.completed,
        "latency covers the window's requests"
    );
    assert!(!r.burst, "{} requests at c=8", r.sent);
    // Little's law: 8 streams each holding a request of mean e2e seconds, 16 tokens each.
    let little = 8.0 * 16.0 / (r.e2e_ms.mean / 1e3);
    let ratio = r.output_tokens_per_s / little;
    assert!(
        (0.85..=1.15).contains(&ratio),
        "{} vs {little}",
        r.output_tokens_per_s
    );

    // 16 requests over 8 streams: two waves, a burst; over 2 streams, not.
    let cfg = config(&sim.url, 16, 4, vec![Level::closed(8)], 16);
    let runner = Runner::new(cfg).await.expect("runner");
    let burst = runner
        .run_level(0, &Level::closed(8), None, CancellationToken::new())
        .await;
    assert!(burst.burst && burst.sent == 16, "{burst:?}");
    let calm = runner
        .run_level(1, &Level::closed(2), None, CancellationToken::new())
        .await;
    assert!(!calm.burst, "{calm:?}");
    assert!(calm.window_s.is_none() && calm.left_out.ramp_up == 0);
}
