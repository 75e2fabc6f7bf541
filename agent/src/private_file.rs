//! Files the agent writes into its data directory (lease epochs, the engine's process-group
//! note, run logs) are the agent's own: created `0600`, as docs/security.md states, whatever
//! the process umask. A run log holds the engine's argv and output (model paths, the prompts an
//! error echoes); the process-group note names what a later agent will signal.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The mode of every file the agent creates in its data directory.
pub(crate) const MODE: u32 = 0o600;

/// Opens `path` for appending, creating it `0600` if missing.
pub(crate) fn append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(MODE)
        .open(path)
}

/// Creates (or truncates) `path`, `0600` if it is new.
pub(crate) fn create(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(MODE)
        .open(path)
}

/// Writes `contents` to `path` (created `0600` if new, replaced otherwise).
pub(crate) fn write(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    create(path)?.write_all(contents.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn every_way_in_creates_the_file_readable_by_the_agent_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (a, c, w) = (
            dir.path().join("a"),
            dir.path().join("c"),
            dir.path().join("w"),
        );
        append(&a).unwrap();
        create(&c).unwrap();
        write(&w, "x").unwrap();
        for p in [a, c, w] {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, MODE, "{}", p.display());
        }
        assert_eq!(std::fs::read_to_string(dir.path().join("w")).unwrap(), "x");
    }
}
