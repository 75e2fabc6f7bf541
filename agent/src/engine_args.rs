//! The engine's own argument list, read before the engine starts: the agent runs the profile's
//! program with its help arguments (`llama-server --help`, `python3 -m sglang.launch_server
//! --help`, `vllm serve --help=all`), parses what it prints (`fleetbench_engines::flags::help`)
//! and checks the caller's flags against that build, on top of the profile's rules. Read once
//! per program file (path and modification time), so an engine upgraded in place is read again
//! and a fleet of repeated applies costs one read. When the engine cannot be asked (no such
//! program, a Python import error, a timeout), the built-in tables stand alone and the plan
//! says so.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use fleetbench_engines::EngineKind;
use fleetbench_engines::flags::{EngineArgs, FlagPolicy};

use crate::engine_user::{Credentials, SwitchIds};

/// How long `--help` may take: SGLang and vLLM import torch first (10-30 s on a cold cache).
const HELP_TIMEOUT: Duration = Duration::from_secs(90);
/// The most help text read (vLLM's `--help=all` is about 150 KiB).
const MAX_HELP: usize = 4 << 20;

/// The built-in help arguments of a kind (after the program), from the kind's module: `None`
/// where the flags are fleetbench's own tables (the simulator) or the profile's (`generic`).
pub(crate) fn default_help_args(kind: EngineKind) -> Option<Vec<String>> {
    fleetbench_engines::defaults(kind)
        .help_args
        .map(|a| a.iter().map(|s| s.to_string()).collect())
}

/// Which program file a read belongs to.
#[derive(Debug, Clone, PartialEq)]
struct Key {
    program: PathBuf,
    modified: Option<SystemTime>,
}

/// The flag policy a profile checks with, after reading the engine's list.
#[derive(Debug, Clone)]
pub struct Effective {
    pub flags: FlagPolicy,
    /// Where the rules come from, in words (logged, and named in errors).
    pub source: String,
}

#[derive(Debug, Default)]
pub(crate) struct Cache {
    last: std::sync::Mutex<Option<(Key, Effective)>>,
}

impl Clone for Cache {
    fn clone(&self) -> Self {
        Cache::default()
    }
}

/// Who the `--help` probe runs as: as the engine will.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProbeAs<'a> {
    /// The engine user (`None`: the agent's own user).
    pub run_as: Option<&'a Credentials>,
    /// Variables of the agent's environment the engine does not inherit.
    pub withheld: &'a [String],
}

/// Where the probe runs: a fresh directory under the system's temporary directory, removed
/// after. `cwd` is its working directory, `scratch` its HOME, TMPDIR and caches.
struct ProbeDirs {
    base: PathBuf,
    cwd: PathBuf,
    scratch: PathBuf,
}

impl ProbeDirs {
    /// As the agent's own user (`run_as` none): one directory of the agent's, mode 0700, both
    /// working directory and scratch. As the engine user: a root-owned 0755 directory holding
    /// `cwd` (root's, 0555, empty: the engine user may enter and read it but not plant a
    /// module there, and `python -m` imports from its working directory first) and `scratch`
    /// (the engine user's, 0700).
    fn make(run_as: Option<&Credentials>) -> std::io::Result<ProbeDirs> {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!(
            "fleetbench-help-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        // Not create_dir_all: a directory someone made under that name first is refused.
        std::fs::create_dir(&base)?;
        let mode =
            |p: &PathBuf, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
        let Some(c) = run_as else {
            mode(&base, 0o700)?;
            return Ok(ProbeDirs {
                cwd: base.clone(),
                scratch: base.clone(),
                base,
            });
        };
        let dirs = ProbeDirs {
            cwd: base.join("cwd"),
            scratch: base.join("scratch"),
            base,
        };
        let made = (|| {
            mode(&dirs.base, 0o755)?;
            std::fs::create_dir(&dirs.cwd)?;
            mode(&dirs.cwd, 0o555)?;
            std::fs::create_dir(&dirs.scratch)?;
            mode(&dirs.scratch, 0o700)?;
            std::os::unix::fs::chown(&dirs.scratch, Some(c.uid), Some(c.gid))
        })();
        if let Err(e) = made {
            dirs.remove();
            return Err(e);
        }
        Ok(dirs)
    }

    /// A scratch subdirectory, the engine user's where the probe runs as it.
    fn sub(&self, name: &str, run_as: Option<&Credentials>) -> std::io::Result<PathBuf> {
        let p = self.scratch.join(name);
        std::fs::create_dir(&p)?;
        if let Some(c) = run_as {
            std::os::unix::fs::chown(&p, Some(c.uid), Some(c.gid))?;
        }
        Ok(p)
    }

    fn remove(&self) {
        // Symlinks the probe left are removed, never followed.
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// Runs `program help_args…` and returns what it printed (stdout and stderr: llama.cpp
/// prints its help on stdout, argparse on stdout, a failing import on stderr). It runs as the
/// engine would: as `run_as` (the engine user, switched the same way), without the `withheld`
/// variables, with the profile's `env`.
async fn run_help(
    program: &PathBuf,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    run_as: Option<&Credentials>,
    withheld: &[String],
) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for name in withheld {
        if !env.contains_key(name) {
            cmd.env_remove(name);
        }
    }
    // vLLM's `--help` imports torch, which leaves `/tmp/torchinductor_<user>` behind: its
    // temporary and cache directories go to a directory of this read's own, removed after.
    let dirs =
        ProbeDirs::make(run_as).map_err(|e| format!("cannot make the probe's directory: {e}"))?;
    cmd.current_dir(&dirs.cwd);
    let mut vars: Vec<(&str, &str)> = crate::supervisor::spawn::SCRATCH_VARS.to_vec();
    if let Some(c) = run_as {
        // The engine user's names, and a HOME of the probe's own (a real one may not exist:
        // the packaged user's is /nonexistent).
        vars.push(("HOME", "home"));
        cmd.env("USER", &c.user).env("LOGNAME", &c.user);
    }
    for (var, sub) in vars {
        if !env.contains_key(var) {
            match dirs.sub(sub, run_as) {
                Ok(p) => {
                    cmd.env(var, p);
                }
                Err(e) => {
                    dirs.remove();
                    return Err(format!("cannot make the probe's directory: {e}"));
                }
            }
        }
    }
    cmd.envs(env);
    // llama.cpp's packaged build finds its shared libraries next to the binary.
    if let Some(dir) = program.parent() {
        let mut path = dir.as_os_str().to_owned();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            path.push(":");
            path.push(old);
        }
        cmd.env("LD_LIBRARY_PATH", path);
    }
    if let Some(ids) = run_as.map(SwitchIds::of) {
        // SAFETY: the closure only makes async-signal-safe calls (setgroups, setresgid,
        // setresuid) on memory allocated before the fork.
        unsafe {
            cmd.pre_exec(move || ids.apply());
        }
    }
    let out = tokio::time::timeout(HELP_TIMEOUT, cmd.output()).await;
    dirs.remove();
    let out = out
        .map_err(|_| format!("no answer within {HELP_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push('\n');
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text.truncate(MAX_HELP);
    Ok(text)
}

impl Cache {
    /// The policy for `program`: read now if this file was not read before.
    pub(crate) async fn effective(
        &self,
        program: &PathBuf,
        base: &FlagPolicy,
        help_args: Option<&[String]>,
        pass_through: &[String],
        env: &std::collections::BTreeMap<String, String>,
        probe_as: ProbeAs<'_>,
    ) -> Effective {
        let ProbeAs { run_as, withheld } = probe_as;
        let key = Key {
            program: program.clone(),
            modified: std::fs::metadata(program).and_then(|m| m.modified()).ok(),
        };
        if let Some((k, e)) = self.last.lock().expect("engine args lock").as_ref()
            && *k == key
        {
            return e.clone();
        }
        let fallback = |why: String| {
            let mut flags = base.clone();
            // Validated when the profile was loaded: the names are flags, none is gated.
            let _ = flags.pass_through_unread(pass_through);
            Effective {
                flags,
                source: format!("built-in tables ({why})"),
            }
        };
        let eff = match help_args {
            None => fallback("this kind is not asked".into()),
            Some(args) => match run_help(program, args, env, run_as, withheld).await {
                Err(e) => fallback(format!("{} {}: {e}", program.display(), args.join(" "))),
                Ok(text) => match EngineArgs::parse(&text) {
                    Err(e) => fallback(format!("{} {}: {e}", program.display(), args.join(" "))),
                    Ok(parsed) => {
                        let mut flags = base.clone();
                        match flags.apply_engine_args(&parsed, pass_through) {
                            Ok(()) => Effective {
                                flags,
                                source: format!(
                                    "{} {} ({} options) and the profile",
                                    program.display(),
                                    args.join(" "),
                                    parsed.options.len()
                                ),
                            },
                            Err(e) => {
                                // A pass-through name this build lacks: the rest still holds,
                                // and the name stays refused.
                                tracing::warn!(error = %e, "pass_through");
                                let mut flags = base.clone();
                                let known: Vec<String> = pass_through
                                    .iter()
                                    .filter(|n| parsed.find(n).is_some())
                                    .cloned()
                                    .collect();
                                let _ = flags.apply_engine_args(&parsed, &known);
                                Effective {
                                    flags,
                                    source: format!(
                                        "{} --help, and the profile ({e})",
                                        program.display()
                                    ),
                                }
                            }
                        }
                    }
                },
            },
        };
        tracing::info!(program = %program.display(), source = %eff.source, "engine flag rules");
        *self.last.lock().expect("engine args lock") = Some((key, eff.clone()));
        eff
    }
}

#[cfg(test)]
mod tests {
    /// The help probe run as the agent's own user (no engine user to drop to) runs in a fresh
    /// directory of the agent's own that nobody else may write: `python -m` imports from its
    /// working directory first. (As root it runs as the engine user: tests/engine_user.rs.)
    #[tokio::test]
    async fn the_help_probe_runs_in_a_private_directory_of_its_own() {
        let out = super::run_help(
            &std::path::PathBuf::from("/bin/sh"),
            &["-c".into(), "pwd; stat -c %a .".into()],
            &Default::default(),
            None,
            &[],
        )
        .await
        .unwrap();
        let mut lines = out.lines();
        let dir = lines.next().unwrap().to_string();
        assert!(dir.contains("fleetbench-help-"), "{out}");
        assert_ne!(
            std::path::Path::new(&dir),
            std::env::current_dir().unwrap().as_path()
        );
        assert_eq!(lines.next(), Some("700"), "{out}");
        assert!(!std::path::Path::new(&dir).exists(), "left behind: {dir}");
    }
}
