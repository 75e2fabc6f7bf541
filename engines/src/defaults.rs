//! Built-in profile data per kind: what to run, how to probe it, how to stop it. The agent
//! builds its default profiles from this; an operator's profile overrides any field.

use crate::EngineKind;
use crate::flags::FlagType;

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
    /// How the program prints its argument list (after the program), read before a start to
    /// learn this build's flags; `None` where the flags are fleetbench's own tables (the
    /// simulator) or the profile's (`generic`).
    pub help_args: Option<&'static [&'static str]>,
    /// Environment variables a caller may set on the built-in profile, by exact name, with the
    /// type of their value. Nothing that names a file, a library or a Python module.
    pub allowed_env: Vec<(&'static str, FlagType)>,
    /// A Python engine (and the torch, Triton and inductor libraries under it) writes caches
    /// and temporary files under the home directory and `/tmp` unless told otherwise: the agent
    /// points them into the run's scratch directory.
    pub python_scratch: bool,
    /// The engine loads no weights and runs nothing a model name points at (fleetbench's own
    /// simulator): its model is only a label, so its built-in profile allows any, and it keeps
    /// the agent's user when the agent runs it from next to itself.
    pub model_is_label: bool,
    /// Where the program serves Prometheus when not on its API port (SGLang's router): its
    /// own default port, which a profile's `metrics_port` overrides; the fixed args pass it as
    /// `{metrics_port}`. `None`: on the API port.
    pub metrics_port: Option<u16>,
    /// A router in front of replicas rather than an engine: it loads no model, and the agent
    /// writes the caller's `EngineSpec.workers` where the fixed args say `{workers}`.
    pub router: bool,
    /// Flags that name upstream servers (worker URLs, disaggregated prefill and decode URLs,
    /// service discovery): pinned like the fixed args, so that no caller flag points the
    /// router anywhere but at the workers the agent allowed.
    pub worker_flags: &'static [&'static str],
}

/// The defaults for `kind`, from its module.
pub fn defaults(kind: EngineKind) -> KindDefaults {
    crate::engine::spec(kind).defaults()
}

/// Fixed arguments as owned strings.
pub(crate) fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Replaces `{model}`, `{host}` and `{port}` in each argument. Other braces are left alone
/// (`{workers}` and `{metrics_port}` are the agent's, which knows them).
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
            // A router loads no model: it takes its workers instead.
            let needed: &[&str] = if d.router {
                &["{workers}", "{host}", "{port}"]
            } else {
                &["{model}", "{host}", "{port}"]
            };
            for p in needed {
                assert!(d.fixed_args.iter().any(|a| a == p), "{kind} lacks {p}");
            }
            assert_eq!(
                d.metrics_port.is_some(),
                d.fixed_args.iter().any(|a| a == "{metrics_port}"),
                "{kind}"
            );
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
