//! The one signal handler of fleetbench's long-running processes (controller, agent, the scale
//! stand-ins, `fleetbench run`): SIGTERM (systemd, Kubernetes, `kill`) and SIGINT (Ctrl-C) both
//! ask for the same orderly stop, so a process never dies mid-write because it was stopped one
//! way rather than the other.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Which signal asked the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Terminate,
    Interrupt,
}

impl Stop {
    /// `SIGTERM` or `SIGINT`, as logs name it.
    pub fn name(self) -> &'static str {
        match self {
            Stop::Terminate => "SIGTERM",
            Stop::Interrupt => "SIGINT",
        }
    }
}

/// Installs the handlers now (so a signal that arrives before the future is polled is not
/// lost) and returns a future that resolves on the first SIGTERM or SIGINT. Fails only when
/// the handlers cannot be installed.
pub fn stop_signal() -> std::io::Result<impl Future<Output = Stop> + Send + 'static> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => Stop::Terminate,
            _ = int.recv() => Stop::Interrupt,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sigterm_and_sigint_each_resolve_it() {
        for (sig, want) in [
            (libc::SIGTERM, Stop::Terminate),
            (libc::SIGINT, Stop::Interrupt),
        ] {
            let stop = stop_signal().unwrap();
            // SAFETY: raise(3) only sends a signal to this process, whose handler for it
            // `stop_signal` has just installed.
            assert_eq!(unsafe { libc::raise(sig) }, 0);
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), stop)
                .await
                .expect("the signal arrives");
            assert_eq!(got, want);
        }
        assert_eq!(Stop::Terminate.name(), "SIGTERM");
    }
}
