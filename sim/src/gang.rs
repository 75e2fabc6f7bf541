//! One engine spanning hosts, as SGLang runs it with `--nnodes N --node-rank R
//! --dist-init-addr HOST:PORT`: one process per node, rank 0 the one that serves the API.
//!
//! The simulator does what fleetbench needs to test its gang logic with real processes, and no
//! more: rank 0 listens on the rendezvous address and waits until every other rank has joined
//! (a TCP connection that each side keeps open for the process's life, standing for the
//! torch.distributed store and the NCCL communicators); the other ranks connect to it, retrying
//! until `--dist-timeout`. Rank 0 answers `/health` 200 only once all ranks have joined and its
//! start-up is done; ranks above 0 serve `/health` alone (SGLang's non-zero ranks start a bare
//! health-check server and no API), 200 once joined.
//!
//! When a peer's connection drops (its process died, its host was cut off), every remaining
//! rank prints what torch.distributed and NCCL print then (`ncclRemoteError ... a remote
//! process exiting prematurely`) and exits 1, as real ranks die when a collective fails. A rank
//! whose peers never come gives up after `--dist-timeout` with torch's own time-out line.
//! The log lines are what `fleetbench_engines::crash` reads as the `rank_lost` class.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::args::SimArgs;
use crate::logs;
use crate::server::AppState;

/// The NCCL version the error lines name (the one SGLang 0.5.x wheels bring).
const NCCL_VERSION: &str = "2.21.5";

/// A peer connection, kept open while the gang lives.
pub struct Peer {
    rank: u32,
    addr: String,
    stream: TcpStream,
}

/// Why the gang could not form.
#[derive(Debug)]
pub struct GangFailed;

/// Joins the gang (`args.nnodes > 1`): rank 0 waits for every peer, the others connect to
/// rank 0. Returns the connections to watch with [`watch`]. Prints the engine's lines on
/// failure; the caller exits 1.
pub async fn join(args: &SimArgs) -> Result<Vec<Peer>, GangFailed> {
    let addr = args.dist_init_addr.clone().unwrap_or_default();
    let timeout = Duration::from_secs_f64(args.dist_timeout_s);
    logs::info(&format!(
        "Init torch distributed begin. nnodes={}, node_rank={}, dist_init_addr={addr}",
        args.nnodes, args.node_rank
    ));
    if args.node_rank == 0 {
        wait_for_peers(&addr, args.nnodes, timeout).await
    } else {
        connect_to_rank0(&addr, args.node_rank, timeout)
            .await
            .map(|p| vec![p])
    }
}

async fn wait_for_peers(
    addr: &str,
    nnodes: u32,
    timeout: Duration,
) -> Result<Vec<Peer>, GangFailed> {
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            logs::raw(&format!(
                "torch.distributed.DistNetworkError: The server socket has failed to listen on \
                 any local network address. port: {}, useIpv6: false, code: -98, name: \
                 EADDRINUSE, message: {e}\n",
                addr.rsplit_once(':').map_or("", |(_, p)| p)
            ));
            return Err(GangFailed);
        }
    };
    let deadline = Instant::now() + timeout;
    let mut peers: Vec<Peer> = Vec::new();
    logs::info(&format!(
        "Waiting for {} peer node(s) to join at {addr} (1/{nnodes} nodes joined)",
        nnodes - 1
    ));
    while peers.len() + 1 < nnodes as usize {
        let left = deadline.saturating_duration_since(Instant::now());
        let accepted = tokio::time::timeout(left, listener.accept()).await;
        let Ok(accepted) = accepted else {
            logs::raw(&format!(
                "torch.distributed.DistStoreError: Timed out after {} seconds waiting for \
                 clients. {}/{nnodes} clients joined.\n",
                timeout.as_secs_f64().round(),
                peers.len() + 1
            ));
            return Err(GangFailed);
        };
        let Ok((stream, from)) = accepted else {
            continue;
        };
        // A peer says its rank first; anything else (a port scan, a probe) is dropped.
        let mut reader = BufReader::new(stream);
        let mut hello = String::new();
        let read = tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut hello)).await;
        let rank = match read {
            Ok(Ok(_)) => hello
                .trim()
                .strip_prefix("rank ")
                .and_then(|r| r.parse::<u32>().ok())
                .filter(|r| *r > 0 && *r < nnodes && !peers.iter().any(|p| p.rank == *r)),
            _ => None,
        };
        let Some(rank) = rank else {
            logs::info(&format!(
                "Ignored a connection from {from}: not a peer rank ({:?})",
                hello.trim()
            ));
            continue;
        };
        peers.push(Peer {
            rank,
            addr: from.to_string(),
            stream: reader.into_inner(),
        });
        logs::info(&format!(
            "Node rank {rank} joined from {from} ({}/{nnodes} nodes joined)",
            peers.len() + 1
        ));
    }
    logs::info(&format!(
        "All {nnodes} nodes joined. Init torch distributed ends."
    ));
    Ok(peers)
}

async fn connect_to_rank0(addr: &str, rank: u32, timeout: Duration) -> Result<Peer, GangFailed> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Ok(mut stream)) =
            tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await
            && stream
                .write_all(format!("rank {rank}\n").as_bytes())
                .await
                .is_ok()
        {
            logs::info(&format!("Joined node rank 0 at {addr} as node rank {rank}"));
            return Ok(Peer {
                rank: 0,
                addr: addr.to_string(),
                stream,
            });
        }
        if Instant::now() >= deadline {
            let (h, p) = addr.rsplit_once(':').unwrap_or((addr, ""));
            logs::raw(&format!(
                "torch.distributed.DistNetworkError: The client socket has timed out after \
                 {}ms while trying to connect to ({h}, {p}).\n",
                timeout.as_millis()
            ));
            return Err(GangFailed);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Watches the peers' connections for the process's life: the first one to close (or fail)
/// ends this rank with NCCL's remote-error lines and exit status 1; with `hang` (`--fault
/// hang-on-peer-loss`) the rank instead logs NCCL's warning and stops answering (`hung`), as a
/// real rank blocked in a collective until NCCL's time-out.
pub fn watch(my_rank: u32, peers: Vec<Peer>, hang: Option<Arc<AppState>>) {
    for mut peer in peers {
        let hang = hang.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            // Peers send nothing after the hello: any end of the stream is the peer's end.
            loop {
                match peer.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            if let Some(state) = hang {
                logs::raw(&format!(
                    "[rank{my_rank}]:[W ProcessGroupNCCL.cpp:1200] NCCL WARN peer node rank {} \
                     ({}) unreachable; waiting in collective\n",
                    peer.rank, peer.addr
                ));
                state.hung.store(true, Ordering::Relaxed);
                return;
            }
            peer_lost(my_rank, peer.rank, &peer.addr);
        });
    }
}

fn peer_lost(my_rank: u32, peer_rank: u32, addr: &str) -> ! {
    let ts = chrono::Local::now().format("%m%d %H:%M:%S%.6f");
    logs::raw(&format!(
        "[rank{my_rank}]:[E{ts} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank \
         {my_rank}] Process group watchdog thread terminated with exception: NCCL error in: \
         ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a \
         network error, NCCL version {NCCL_VERSION}\n\
         ncclRemoteError: A call failed possibly due to a network error or a remote process \
         exiting prematurely.\n\
         Last error:\n\
         socket recv: Connection closed by remote peer {addr} (node rank {peer_rank})\n"
    ));
    std::process::exit(1);
}
