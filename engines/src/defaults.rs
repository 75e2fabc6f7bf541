//! Built-in profile data per kind: what to run, how to probe it, how to stop it. The agent
//! builds its default profiles from this; an operator's profile overrides any field.

use crate::EngineKind;

/// How to stop an engine: the signal sent to its process group before the grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum StopSignal {
    /// SIGTERM: every built-in engine drains or aborts cleanly on it.
    Sigterm,
    /// SIGINT: for programs that only handle Ctrl-C.
    Sigint,
}

impl StopSignal {
    /// The Linux signal number.
    pub fn number(self) -> i32 {
        match self {
            StopSignal::Sigterm => 15,
            StopSignal::Sigint => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StopSignal::Sigterm => "SIGTERM",
            StopSignal::Sigint => "SIGINT",
        }
    }
}

/// The built-in defaults of one kind.
#[derive(Debug, Clone, PartialEq)]
pub struct KindDefaults {
    /// Program to execute (looked up on `PATH` by the agent); empty for `generic`.
    pub program: &'static str,
    /// Arguments before the caller's flags, with `{model}`, `{host}`, `{port}` placeholders.
    pub fixed_args: Vec<String>,
    /// HTTP path that answers 200 once the engine serves.
    pub health_path: &'static str,
    /// Environment every run of the kind gets (a profile's own `env` may override it).
    pub env: &'static [(&'static str, &'static str)],
    /// Prometheus exposition path.
    pub metrics_path: &'static str,
    pub stop_signal: StopSignal,
    /// Seconds between the stop signal and SIGKILL to the group.
    pub grace_s: u64,
    /// Seconds from spawn to a healthy probe before the start counts as failed.
    pub start_timeout_s: u64,
    /// The engine's own default port (the agent always passes one explicitly).
    pub default_port: u16,
}

/// The defaults for `kind`.
pub fn defaults(kind: EngineKind) -> KindDefaults {
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match kind {
        EngineKind::Sglang => KindDefaults {
            program: "python3",
            fixed_args: args(&[
                "-m",
                "sglang.launch_server",
                "--model-path",
                "{model}",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--enable-metrics",
            ]),
            // SGLang's /health answers 503 until the server is up (after its warm-up), which
            // is the readiness wanted; but by default it then submits a one-token generation
            // per probe, which lands in the measured batch. With this variable false (SGLang
            // 0.5.23's environ.py) it answers from the server's state alone. /model_info and
            // /v1/models never generate, but answer before the warm-up request has run.
            health_path: "/health",
            env: &[("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "false")],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 30,
            start_timeout_s: 1800,
            default_port: 30000,
        },
        EngineKind::Vllm => KindDefaults {
            program: "vllm",
            fixed_args: args(&["serve", "{model}", "--host", "{host}", "--port", "{port}"]),
            health_path: "/health",
            env: &[],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 30,
            start_timeout_s: 1800,
            default_port: 8000,
        },
        EngineKind::Llamacpp => KindDefaults {
            program: "llama-server",
            fixed_args: args(&[
                "-m",
                "{model}",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--metrics",
            ]),
            health_path: "/health",
            env: &[],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 10,
            start_timeout_s: 120,
            // The packaged build's README says 9931; older builds used 8080.
            default_port: 9931,
        },
        EngineKind::Sim => KindDefaults {
            program: "fleetbench-sim",
            fixed_args: args(&["--host", "{host}", "--port", "{port}", "--model", "{model}"]),
            health_path: "/health",
            env: &[],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 5,
            start_timeout_s: 60,
            default_port: 30000,
        },
        EngineKind::Generic => KindDefaults {
            program: "",
            fixed_args: Vec::new(),
            health_path: "/health",
            env: &[],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 10,
            start_timeout_s: 600,
            default_port: 8000,
        },
    }
}

/// Replaces `{model}`, `{host}` and `{port}` in each argument. Other braces are left alone.
pub fn expand_args(args: &[String], model: &str, host: &str, port: u16) -> Vec<String> {
    let port = port.to_string();
    args.iter()
        .map(|a| {
            a.replace("{model}", model)
                .replace("{host}", host)
                .replace("{port}", &port)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_kind_but_generic_names_a_program_and_its_placeholders() {
        for kind in EngineKind::ALL {
            let d = defaults(kind);
            if kind == EngineKind::Generic {
                assert!(d.program.is_empty());
                continue;
            }
            assert!(!d.program.is_empty(), "{kind}");
            for p in ["{model}", "{host}", "{port}"] {
                assert!(d.fixed_args.iter().any(|a| a == p), "{kind} lacks {p}");
            }
            assert!(d.grace_s > 0 && d.start_timeout_s > d.grace_s, "{kind}");
        }
        assert_eq!(defaults(EngineKind::Vllm).fixed_args[0], "serve");
        assert_eq!(defaults(EngineKind::Sglang).stop_signal.number(), 15);
    }

    #[test]
    fn expand_fills_placeholders() {
        let d = defaults(EngineKind::Llamacpp);
        let a = expand_args(&d.fixed_args, "/m.gguf", "127.0.0.1", 4321);
        assert_eq!(
            a,
            [
                "-m",
                "/m.gguf",
                "--host",
                "127.0.0.1",
                "--port",
                "4321",
                "--metrics"
            ]
        );
    }
}
