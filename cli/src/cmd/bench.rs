//! `fleetbench bench`: runs the load generator against an OpenAI-compatible server (or a
//! simulated engine it starts itself with `--sim`) and prints a table per level.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use fleetbench_loadgen::{
    Api, BenchConfig, BenchReport, ConnectionStats, Level, Runner, Slo, table,
};
use indicatif::{ProgressBar, ProgressStyle};
use tokio_util::sync::CancellationToken;

use super::bench_sim::Sim;
use super::bench_vllm;

mod flags;
pub use flags::config;
use flags::config_error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DatasetKind {
    Random,
    Sharegpt,
    SharedPrefix,
    /// One prompt per line (vLLM's `custom` dataset is this form).
    #[value(alias = "custom")]
    Jsonl,
    Trace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SimMode {
    /// Every request gets exactly `--sim-ttft-ms` and `--sim-itl-ms`.
    Fixed,
    /// The simulator's continuous-batching model (its own defaults, plus `--sim-arg`).
    Model,
}

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Server to load, e.g. http://127.0.0.1:30000 or https://gateway.example (omit with --sim).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Without --base-url: the server's host (vLLM's flag; default localhost when --port is given).
    #[arg(long, conflicts_with_all = ["base_url", "sim"])]
    pub host: Option<String>,
    /// Without --base-url: the server's port (vLLM's flag; default 8000 when --host is given).
    #[arg(long, conflicts_with_all = ["base_url", "sim"])]
    pub port: Option<u16>,
    /// Sent as `Authorization: Bearer KEY` with every request [default: $OPENAI_API_KEY, unless
    /// an Authorization --header is given].
    #[arg(long)]
    pub api_key: Option<String>,
    /// Extra header for every request, 'Name: value' (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// PEM file of the CA to trust for an https:// server, instead of the system's store.
    #[arg(long, value_name = "PEM")]
    pub ca_cert: Option<PathBuf>,
    /// Start `fleetbench-sim` (found next to this executable) on a free port and bench it.
    #[arg(long, alias = "start-sim")]
    pub sim: bool,
    #[arg(long, value_enum, default_value = "fixed", requires = "sim")]
    pub sim_mode: SimMode,
    #[arg(long, default_value_t = 50.0, requires = "sim")]
    pub sim_ttft_ms: f64,
    #[arg(long, default_value_t = 5.0, requires = "sim")]
    pub sim_itl_ms: f64,
    /// Extra flag for the simulator (repeatable), e.g. --sim-arg=--max-running-requests=64.
    #[arg(long, allow_hyphen_values = true, requires = "sim")]
    pub sim_arg: Vec<String>,
    /// completions or chat.
    #[arg(long, default_value = "completions")]
    pub api: Api,
    /// The API by its path, as vLLM names it: /v1/completions or /v1/chat/completions.
    #[arg(long, conflicts_with = "api")]
    pub endpoint: Option<String>,
    /// The API by vLLM's backend name: openai or vllm (completions), openai-chat (chat).
    #[arg(long, conflicts_with = "api")]
    pub backend: Option<String>,
    /// Model name (default: the first one of /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// Closed-loop levels, e.g. 1,64,512.
    #[arg(long, value_delimiter = ',', conflicts_with = "request_rate")]
    pub concurrency: Vec<u32>,
    /// Open-loop levels in requests/s, e.g. 5,20.
    #[arg(long, value_delimiter = ',')]
    pub request_rate: Vec<f64>,
    /// Cap on requests in flight for --request-rate levels; alone (or with --request-rate inf),
    /// a closed loop at that concurrency, as `vllm bench serve` runs it.
    #[arg(long)]
    pub max_concurrency: Option<u32>,
    /// Gamma shape of inter-arrival times: 1 is Poisson, below 1 burstier.
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Measured requests per level.
    #[arg(long, conflicts_with = "duration")]
    pub num_prompts: Option<u32>,
    /// Length of each level instead of a request count, e.g. 60s.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Requests sent and discarded before each level.
    #[arg(long, default_value_t = 0)]
    pub warmup: u32,
    /// Spread the start of a closed-loop level's streams over this long (stream s of c first
    /// sends at ramp·s/c, its latency counted from then) instead of sending c requests at one
    /// instant; e.g. one inter-token gap, 20ms.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ramp_up: Option<Duration>,
    /// Measure steady state only: requests intended in this window after the ramp-up count,
    /// throughput counts the tokens that arrived in it; the ramp-up and the drain after the
    /// last send are left out (and counted in `left_out`). With --duration the level runs for
    /// the ramp-up plus the window.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub window: Option<Duration>,
    /// Leave the ramp-up and the drain out of the figures even without --window (the window
    /// then runs from the ramp-up's end to the last send).
    #[arg(long)]
    pub steady: bool,
    #[arg(long, alias = "dataset-name", value_enum, default_value = "random")]
    pub dataset: DatasetKind,
    /// File of the sharegpt, jsonl or trace dataset.
    #[arg(long)]
    pub dataset_path: Option<PathBuf>,
    /// Prompt tokens (random; suffix tokens for shared-prefix).
    #[arg(long, alias = "random-input-len", default_value_t = 128)]
    pub input_len: u32,
    /// Output tokens (max_tokens); for sharegpt it replaces the reply's length.
    #[arg(long, alias = "random-output-len")]
    pub output_len: Option<u32>,
    /// Lengths drawn from [len × ratio, len]; 1 gives exact lengths.
    #[arg(long, default_value_t = 1.0)]
    pub range_ratio: f64,
    /// Trace: tokens each of the trace's 512-token blocks (hash_ids) is sent as; fewer scale
    /// every prompt down (16..=512).
    #[arg(long, default_value_t = 512)]
    pub trace_block_tokens: u32,
    /// Trace: send the requests at their timestamps divided by this (2: twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub trace_speedup: f64,
    #[arg(long, default_value_t = 8)]
    pub groups: u32,
    #[arg(long, default_value_t = 16)]
    pub prompts_per_group: u32,
    #[arg(long, default_value_t = 512)]
    pub prefix_len: u32,
    /// SLOs for goodput, e.g. ttft_ms=500,tpot_ms=50,e2e_ms=10000.
    #[arg(long)]
    pub slo: Option<Slo>,
    /// vLLM's form of --slo: ttft:500 tpot:50 e2el:10000 (ms).
    #[arg(long, num_args = 1.., conflicts_with = "slo")]
    pub goodput: Vec<String>,
    #[arg(
        long,
        alias = "metric-percentiles",
        value_delimiter = ',',
        default_value = "50,90,99,99.9"
    )]
    pub percentiles: Vec<f64>,
    /// Write {"levels": [...]} here.
    #[arg(long)]
    pub output_json: Option<PathBuf>,
    /// Write one JSON line per request here.
    #[arg(long)]
    pub output_details: Option<PathBuf>,
    /// Also write each level's results in `vllm bench serve --save-result`'s JSON form.
    #[arg(long)]
    pub save_result: bool,
    /// File of --save-result (default fleetbench-<load>-<model>-<date>.json); with several
    /// levels, each level's load is added before the extension.
    #[arg(long, requires = "save_result")]
    pub result_filename: Option<PathBuf>,
    /// Directory of --save-result's files.
    #[arg(long, requires = "save_result")]
    pub result_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Local tokenizer.json to shape prompts with (default: the server's /tokenize).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Let the server stop at end-of-sequence (default: ignore_eos, fixed output lengths).
    #[arg(long)]
    pub no_ignore_eos: bool,
    /// Accepted for vLLM's command lines: ignore_eos is already the default.
    #[arg(long, conflicts_with = "no_ignore_eos")]
    pub ignore_eos: bool,
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
}

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    let mut sim = None;
    let base_url = match (&a.base_url, a.sim) {
        (Some(_), true) => bail!("--sim starts its own server: leave out --base-url"),
        (Some(u), false) => u.clone(),
        (None, true) => {
            let s = Sim::start(&a).await?;
            let url = s.url.clone();
            sim = Some(s);
            url
        }
        (None, false) if a.host.is_some() || a.port.is_some() => format!(
            "http://{}:{}",
            a.host.as_deref().unwrap_or("localhost"),
            a.port.unwrap_or(8000)
        ),
        (None, false) => {
            bail!("--base-url: give the server's URL (or --sim to start a simulated engine)")
        }
    };
    let cfg = config(&a, base_url)?;
    let result = bench(&a, cfg).await;
    if let Some(s) = sim {
        s.stop().await;
    }
    result
}

async fn bench(a: &Args, cfg: BenchConfig) -> anyhow::Result<ExitCode> {
    eprintln!(
        "fleetbench bench: {} ({:?}), preparing prompts…",
        cfg.base_url, cfg.api
    );
    let levels = cfg.levels.clone();
    let https = cfg.base_url.starts_with("https://");
    let runner = Runner::new(cfg)
        .await
        .map_err(config_error)
        .context("cannot start the benchmark")?
        .with_ramp_up(a.ramp_up.unwrap_or_default());
    let runner = if a.steady || a.window.is_some() {
        runner.with_window(a.window)
    } else {
        runner
    };
    let shaping = runner.shaping();
    eprintln!(
        "model {}; prompt lengths from {}{}",
        runner.model(),
        shaping.source,
        if shaping.inexact > 0 {
            format!(" ({} prompts not exact)", shaping.inexact)
        } else {
            String::new()
        }
    );
    let cancel = CancellationToken::new();
    let interrupted = cancel.clone();
    let stop = fleetbench_support::signal::stop_signal().context("watching SIGINT and SIGTERM")?;
    tokio::spawn(async move {
        let signal = stop.await;
        eprintln!("\n{}: finishing with what was measured", signal.name());
        interrupted.cancel();
    });
    let mut details = match &a.output_details {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .with_context(|| format!("--output-details: cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let mut report = BenchReport::default();
    let date = bench_vllm::date_now();
    for (i, level) in levels.iter().enumerate() {
        if cancel.is_cancelled() {
            break;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<fleetbench_loadgen::Progress>();
        let bar = ProgressBar::new(0).with_style(
            ProgressStyle::with_template("{prefix} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(level_name(level));
        let connections_before = runner.connection_stats();
        let bar2 = bar.clone();
        let ui = tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                match p.total {
                    Some(t) => bar2.set_length(t),
                    None => bar2.set_length(p.completed + p.failed),
                }
                bar2.set_position(p.completed + p.failed);
                bar2.set_message(format!("{} failed", p.failed));
            }
        });
        let outcome = runner
            .run_level_detailed(
                i,
                level,
                Some(tx),
                cancel.clone(),
                details.is_some() || a.save_result,
            )
            .await;
        let _ = ui.await;
        bar.finish_and_clear();
        print!("{}", table::level_block(runner.model(), &outcome.report));
        let c = runner.connection_stats().since(&connections_before);
        eprintln!("{}", connection_note(&c, level, https, a.warmup));
        if a.save_result {
            let meta = bench_vllm::Meta {
                api: runner.config().api,
                model: runner.model(),
                tokenizer: a.tokenizer.as_deref(),
                num_prompts: a.num_prompts,
                burstiness: a.burstiness,
                percentiles: &a.percentiles,
                goodput: runner.config().slo.is_some(),
                date: &date,
            };
            let doc = bench_vllm::result(&meta, &outcome.report, &outcome.records);
            let path = bench_vllm::path(
                a.result_dir.as_deref(),
                a.result_filename.as_deref(),
                &outcome.report,
                levels.len(),
                runner.model(),
                &date,
            );
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("--save-result: cannot create {}", dir.display()))?;
            }
            let text = serde_json::to_string_pretty(&doc).context("--save-result")?;
            std::fs::write(&path, text)
                .with_context(|| format!("--save-result: cannot write {}", path.display()))?;
            eprintln!("vLLM-format result: {}", path.display());
        }
        if let Some(w) = details.as_mut() {
            for r in &outcome.records {
                writeln!(w, "{}", r.to_json_line()).context("--output-details: write failed")?;
            }
        }
        report.levels.push(outcome.report);
    }
    if report.levels.len() > 1 {
        println!("{}", table::summary(&report.levels));
    }
    if let Some(w) = details.as_mut() {
        w.flush().context("--output-details: write failed")?;
    }
    if let Some(p) = &a.output_json {
        std::fs::write(p, report.to_json_pretty())
            .with_context(|| format!("--output-json: cannot write {}", p.display()))?;
    }
    let all_failed = report
        .levels
        .iter()
        .any(|l| l.completed == 0 && !l.cancelled);
    Ok(if all_failed || cancel.is_cancelled() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// What connection set-up cost during a level, and how much of it the measured figures hold: a
/// closed loop opens its streams' connections before its clock starts; a connection opened after
/// that (an open-loop slot's first, or a reconnect after the server closed a kept-alive one, as
/// llama-server does after every streamed answer) is opened for a request already due, whose
/// TTFT and E2E then include the TCP connect and, for https, the TLS handshake.
fn connection_note(c: &ConnectionStats, level: &Level, https: bool, warmup: u32) -> String {
    let mean = |d: Duration| {
        if c.opened == 0 {
            0.0
        } else {
            d.as_secs_f64() * 1e3 / c.opened as f64
        }
    };
    let tls = if https {
        format!(", TLS handshake mean {:.2} ms", mean(c.tls_handshake))
    } else {
        String::new()
    };
    let before_clock = match (level.request_rate, level.concurrency) {
        (None, Some(slots)) => u64::from(slots),
        _ => 0,
    };
    let measuring = c.opened.saturating_sub(before_clock);
    let warm = if warmup > 0 {
        " (warm-up's included)"
    } else {
        ""
    };
    format!(
        "connections: {} opened{warm}, TCP connect mean {:.2} ms{tls}; {measuring} opened for a \
         request already due: those requests' TTFT and E2E include the set-up",
        c.opened,
        mean(c.tcp_connect),
    )
}

fn level_name(l: &Level) -> String {
    match (l.concurrency, l.request_rate) {
        (_, Some(r)) => format!("rate {r}/s"),
        (Some(c), None) => format!("conc {c}"),
        _ => "level".into(),
    }
}

#[cfg(test)]
mod tests;
