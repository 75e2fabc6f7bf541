//! `<data_dir>/lease.epoch`, the last epoch the agent handed out: read once at start, where a
//! file that cannot be read or holds no positive number stops the agent (starting again at 1
//! would hand out epochs a stale holder may still use), and written before each grant so that
//! neither a crash nor a power cut loses an epoch that was handed out.

use std::io::Write;
use std::path::{Path, PathBuf};

pub(super) const EPOCH_FILE: &str = "lease.epoch";
/// Where a new epoch is written before it is renamed over [`EPOCH_FILE`].
pub(super) const EPOCH_TMP: &str = "lease.epoch.tmp";

/// The epoch file exists but cannot be trusted: the agent does not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "lease epoch file {path}: {problem}; the agent will not start, since counting again from 1 \
     would hand out epochs a stale lease holder may still use. Repair it: write one number \
     at least as large as the last epoch this agent handed out (its log says \"lease \
     acquired\" with each epoch), or make the file readable"
)]
pub struct EpochFileError {
    pub path: PathBuf,
    pub problem: String,
}

/// The last epoch saved at `path`: 0 when there is no file.
pub(super) fn read_epoch(path: &Path) -> Result<u64, EpochFileError> {
    let bad = |problem: String| EpochFileError {
        path: path.to_path_buf(),
        problem,
    };
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(bad(format!("cannot be read: {e}"))),
    };
    let text = String::from_utf8_lossy(&text);
    let t = text.trim();
    match t.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => {
            let shown: String = t.chars().take(40).collect();
            Err(bad(format!(
                "holds {shown:?} ({} bytes), not a positive epoch number",
                text.len()
            )))
        }
    }
}

/// Writes `epoch` to `path` durably: a temporary file beside it, fsync, rename over it, fsync
/// of the directory (so neither the contents nor the rename are lost in a power cut).
pub(super) fn save_epoch(path: &Path, epoch: u64) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(EPOCH_TMP);
    let mut f = crate::private_file::create(&tmp)?;
    f.write_all(format!("{epoch}\n").as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_or_unreadable_epoch_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(EPOCH_FILE);
        for bad in ["", "\n", "nine\n", "0\n", "-3\n", "18446744073709551616\n"] {
            std::fs::write(&file, bad).unwrap();
            let e = read_epoch(&file).unwrap_err();
            assert_eq!(e.path, file);
            let text = e.to_string();
            assert!(
                text.contains(&file.display().to_string()) && text.contains("not a positive"),
                "{bad:?}: {text}"
            );
        }
        // A directory in its place cannot be read as a file.
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        let e = read_epoch(&file).unwrap_err().to_string();
        assert!(e.contains("cannot be read"), "{e}");
    }
}
