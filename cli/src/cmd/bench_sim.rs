//! The simulated engine `fleetbench bench --sim` starts, runs against, and stops.

use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::AsyncBufReadExt;

use super::bench::{Args, SimMode};

/// A `fleetbench-sim` child process on a free loopback port.
pub struct Sim {
    child: tokio::process::Child,
    pub url: String,
}

impl Sim {
    pub async fn start(a: &Args) -> anyhow::Result<Sim> {
        let exe = std::env::current_exe().context("cannot locate this executable")?;
        let path = exe.with_file_name("fleetbench-sim");
        if !path.is_file() {
            bail!(
                "--sim: {} not found (build it next to fleetbench: cargo build --release -p fleetbench-sim)",
                path.display()
            );
        }
        let mut cmd = tokio::process::Command::new(&path);
        cmd.args(["--host", "127.0.0.1", "--port", "0"]);
        if a.sim_mode == SimMode::Fixed {
            cmd.arg("--ttft-ms")
                .arg(a.sim_ttft_ms.to_string())
                .arg("--itl-ms")
                .arg(a.sim_itl_ms.to_string());
        }
        if let Some(m) = &a.model {
            cmd.arg("--model").arg(m);
        }
        cmd.args(&a.sim_arg)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("--sim: cannot start {}", path.display()))?;
        let stdout = child.stdout.take().context("--sim: no stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    return Ok(rest.trim().to_string());
                }
            }
            anyhow::Ok(String::new())
        })
        .await
        .context("--sim: the simulator did not say where it listens within 60 s")??;
        if url.is_empty() {
            let status = child.wait().await.ok();
            bail!("--sim: the simulator exited before listening ({status:?})");
        }
        // Keep draining its stdout so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        eprintln!("started fleetbench-sim at {url}");
        Ok(Sim { child, url })
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}
