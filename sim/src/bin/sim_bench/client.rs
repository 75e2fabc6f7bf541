//! A raw HTTP/1.1 streaming client, lean enough that the simulator, not it, sets the figures:
//! one request on a keep-alive connection, a timed stream, a closed-loop level.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

pub(crate) fn request(prompt_words: usize, max_tokens: u32) -> Vec<u8> {
    let prompt = vec!["hello"; prompt_words].join(" ");
    let body = format!(
        r#"{{"prompt":"{prompt}","max_tokens":{max_tokens},"ignore_eos":true,"stream":true}}"#
    );
    format!(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One streamed request on a keep-alive connection; returns (TTFT, E2E, events).
pub(crate) async fn one(
    s: &mut TcpStream,
    req: &[u8],
    buf: &mut [u8],
    gaps: &mut Vec<f64>,
) -> anyhow::Result<(Duration, Duration, u64)> {
    let t0 = Instant::now();
    s.write_all(req).await?;
    let mut events = 0u64;
    let mut prev = 0u8;
    let mut first = None;
    let mut last_event: Option<Instant> = None;
    let mut tail = [0u8; 5];
    loop {
        let n = s.read(buf).await?;
        if n == 0 {
            bail!("connection closed mid-stream");
        }
        let now = Instant::now();
        for &c in &buf[..n] {
            if c == b'\n' && prev == b'\n' {
                events += 1;
                if first.is_none() {
                    first = Some(now);
                }
                if let Some(l) = last_event {
                    gaps.push((now - l).as_secs_f64() * 1e3);
                }
                last_event = Some(now);
            }
            prev = c;
        }
        // The chunked body ends with the zero-size chunk.
        if n >= 5 {
            tail.copy_from_slice(&buf[n - 5..n]);
        } else {
            tail.rotate_left(n);
            tail[5 - n..].copy_from_slice(&buf[..n]);
        }
        if &tail == b"0\r\n\r\n" {
            break;
        }
    }
    let end = Instant::now();
    Ok((first.unwrap_or(end) - t0, end - t0, events))
}

pub(crate) async fn stream_bench(
    port: u16,
    conc: usize,
    tokens: u32,
    secs: f64,
) -> anyhow::Result<(f64, u64)> {
    let req = Arc::new(request(16, tokens));
    let total = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let req = req.clone();
        let total = total.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
            s.set_nodelay(true)?;
            let mut buf = vec![0u8; 256 * 1024];
            let mut gaps = Vec::new();
            while Instant::now() < stop {
                gaps.clear();
                let (_, _, events) = one(&mut s, &req, &mut buf, &mut gaps).await?;
                // Token events, without the finish event and [DONE].
                total.fetch_add(events.saturating_sub(2), Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let t0 = Instant::now();
    for t in tasks {
        t.await??;
    }
    let dt = t0.elapsed().as_secs_f64();
    let n = total.load(Relaxed);
    Ok((n as f64 / dt, n))
}

pub(crate) async fn closed_level(
    port: u16,
    conc: usize,
    n: usize,
    req: Arc<Vec<u8>>,
) -> anyhow::Result<Level> {
    let left = Arc::new(AtomicU64::new(n as u64));
    let tokens = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let (left, tokens, req) = (left.clone(), tokens.clone(), req.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
            s.set_nodelay(true)?;
            let mut buf = vec![0u8; 64 * 1024];
            let mut ttfts = Vec::new();
            let mut gaps = Vec::new();
            while left
                .fetch_update(Relaxed, Relaxed, |v| v.checked_sub(1))
                .is_ok()
            {
                let before = gaps.len();
                let (ttft, _, events) = one(&mut s, &req, &mut buf, &mut gaps).await?;
                // Token gaps only: drop the gaps to the finish event and [DONE].
                let keep = gaps.len().saturating_sub(2).max(before);
                gaps.truncate(keep);
                tokens.fetch_add(events.saturating_sub(2), Relaxed);
                ttfts.push(ttft.as_secs_f64() * 1e3);
            }
            anyhow::Ok((ttfts, gaps))
        }));
    }
    let mut ttfts = Vec::new();
    let mut gaps = Vec::new();
    for t in tasks {
        let (a, b) = t.await??;
        ttfts.extend(a);
        gaps.extend(b);
    }
    let dt = t0.elapsed().as_secs_f64();
    Ok(Level {
        output_tokens_per_s: tokens.load(Relaxed) as f64 / dt,
        ttft_p50: pct(&mut ttfts, 50.0),
        ttft_p99: pct(&mut ttfts, 99.0),
        itl_p50: pct(&mut gaps, 50.0),
        itl_p99: pct(&mut gaps, 99.0),
    })
}

pub(crate) struct Level {
    pub(crate) output_tokens_per_s: f64,
    pub(crate) ttft_p50: f64,
    pub(crate) ttft_p99: f64,
    pub(crate) itl_p50: f64,
    pub(crate) itl_p99: f64,
}

pub(crate) fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}
