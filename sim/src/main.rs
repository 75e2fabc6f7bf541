//! `fleetbench-sim`: the simulated inference server.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use fleetbench_sim::args::{ArgError, SimArgs, parse_args, usage};
use fleetbench_sim::engine::Engine;
use fleetbench_sim::logs;
use fleetbench_sim::metrics::Metrics;
use fleetbench_sim::model::ModelParams;
use fleetbench_sim::server::{AppState, serve};
use fleetbench_sim::startup::{self, StartupOutcome};
use fleetbench_sim::timer::Timer;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(ArgError::HelpRequested) => {
            println!(
                "{}\n\nSimulated SGLang-like server (fleetbench). See the fleetbench_sim crate docs.",
                usage()
            );
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{}\nfleetbench-sim: error: {e}", usage());
            return ExitCode::from(2);
        }
    };
    let workers = args.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let rt = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fleetbench-sim: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(run(args))
}

async fn run(args: SimArgs) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "fleetbench-sim: cannot bind {}:{}: {e}",
                args.host, args.port
            );
            return ExitCode::FAILURE;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fleetbench-sim: no local address: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut args = args;
    args.port = addr.port();
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "fleetbench-sim listening on http://{addr}");
        let _ = out.flush();
    }
    tokio::spawn(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        logs::server(&format!("Received {name}. Gracefully exiting..."));
        std::process::exit(0);
    });
    // A failing memory plan is reported by the start-up sequence; until then the server
    // answers 503 with a placeholder pool size.
    let params =
        ModelParams::from_args(&args).unwrap_or_else(|_| ModelParams::with_kv_tokens(&args, 0));
    let fields = startup::effective_args(&args, &params);
    let info = startup::server_info(&fields, &params);
    let metrics = Arc::new(Metrics::new(params.max_total_num_tokens));
    let engine = args
        .fixed_latency()
        .is_none()
        .then(|| Engine::new(params.clone(), metrics.clone()));
    let timer = match Timer::new() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("fleetbench-sim: cannot create a timerfd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let state = AppState::new(
        args.clone(),
        params,
        info,
        metrics,
        engine.clone(),
        timer.clone(),
    );
    tokio::spawn(serve(listener, state.clone()));
    // A rank of an engine spanning hosts meets its peers before it loads anything, as
    // torch.distributed's init comes first in SGLang.
    if args.nnodes > 1 {
        match fleetbench_sim::gang::join(&args).await {
            Ok(peers) => {
                let hang = args.faults.hang_on_peer_loss.then(|| state.clone());
                fleetbench_sim::gang::watch(args.node_rank, peers, hang)
            }
            Err(_) => return ExitCode::FAILURE,
        }
    }
    match startup::run(&args, &fields).await {
        StartupOutcome::Failed => return ExitCode::FAILURE,
        StartupOutcome::Ready => {}
    }
    if let Some(engine) = engine {
        tokio::spawn(engine.run(
            timer,
            state.noise_seed,
            args.jitter,
            args.decode_ms_per_1k_context,
        ));
    }
    state.ready.store(true, Relaxed);
    std::future::pending::<ExitCode>().await
}
