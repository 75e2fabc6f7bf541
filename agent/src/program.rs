//! Where a profile's program is found.

use std::path::{Path, PathBuf};

/// Finds the program: an absolute path as is; a bare name next to the agent's own executable
/// (where `fleetbench-sim` is installed with it), then on `PATH`. Relative paths are refused:
/// what they name would depend on the agent's working directory.
pub fn resolve_program(program: &str) -> Result<PathBuf, String> {
    let p = Path::new(program);
    if p.is_absolute() {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(format!("{program} is not an executable file"))
        };
    }
    if program.contains('/') {
        return Err("relative paths are not allowed: give an absolute path or a bare name".into());
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        dirs.push(dir);
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .map(|d| d.join(program))
        .find(|c| is_executable(c))
        .ok_or_else(|| "not found next to the agent's executable nor on PATH".to_string())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
