//! Who engines run as. An engine runs code the agent did not write (Python packages, kernels,
//! whatever a model repository ships), so where the agent runs as root its engines get a
//! separate unprivileged user (`[engine_user] name`, default `fleetbench-engine`) with only the
//! groups GPU device nodes need, and never the agent's key. Where that user is missing the
//! agent refuses to start engines, unless the profile names `run_as_root = true`. An agent
//! that is not root has nothing to drop: its engines run as its own user (and can read what
//! it can read: docs/security.md says so).

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Group, User};
use serde::Deserialize;

/// `[engine_user]` in the agent's config.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EngineUserConfig {
    /// The user engines run as when the agent runs as root.
    #[serde(default = "default_name")]
    pub name: String,
    /// Supplementary groups besides the user's own (GPU device nodes: `video`, `render`).
    /// Unset: those two where the host has them; named here: each must exist.
    pub groups: Option<Vec<String>>,
}

fn default_name() -> String {
    "fleetbench-engine".into()
}

impl Default for EngineUserConfig {
    fn default() -> Self {
        EngineUserConfig {
            name: default_name(),
            groups: None,
        }
    }
}

/// The groups GPU device nodes belong to on common distributions.
const GPU_GROUPS: [&str; 2] = ["video", "render"];

/// What an engine process is switched to between fork and exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: the user's own (`/etc/group`) and the configured ones.
    pub groups: Vec<u32>,
    /// Its home directory (the engine's `HOME` unless the profile's env sets one).
    pub home: PathBuf,
}

/// Why engines cannot get their user.
#[derive(Debug, thiserror::Error)]
pub enum EngineUserError {
    #[error(
        "the agent runs as root and its engine user {user:?} (engine_user.name) does not exist, \
         so engines are not started: create it (useradd --system --no-create-home --shell \
         /usr/sbin/nologin {user}; the fleetbench-agent package does), or run this profile's \
         engines as root by naming run_as_root = true in [profiles.{profile}]"
    )]
    NoUser { user: String, profile: String },
    #[error("engine_user.name: {user:?} is uid 0; engines run as an unprivileged user")]
    IsRoot { user: String },
    #[error("engine_user.groups: group {group:?} does not exist on this host")]
    NoGroup { group: String },
    #[error("engine_user: looking up {what}: {reason}")]
    Lookup { what: String, reason: String },
}

/// Whether this process can switch engines to another user (it is root).
pub fn agent_is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The credentials a profile's engines get: `None` means the agent's own (the agent is not
/// root, or the profile names `run_as_root`).
pub fn for_profile(
    cfg: &EngineUserConfig,
    run_as_root: bool,
    profile: &str,
) -> Result<Option<Credentials>, EngineUserError> {
    if !agent_is_root() || run_as_root {
        return Ok(None);
    }
    resolve(cfg, profile).map(Some)
}

/// Looks the engine user and its groups up (every call: a user created after the agent
/// started is found).
pub fn resolve(cfg: &EngineUserConfig, profile: &str) -> Result<Credentials, EngineUserError> {
    let lookup = |what: &str, e: nix::Error| EngineUserError::Lookup {
        what: what.to_string(),
        reason: e.to_string(),
    };
    let user = User::from_name(&cfg.name)
        .map_err(|e| lookup(&format!("user {:?}", cfg.name), e))?
        .ok_or_else(|| EngineUserError::NoUser {
            user: cfg.name.clone(),
            profile: profile.to_string(),
        })?;
    if user.uid.is_root() {
        return Err(EngineUserError::IsRoot {
            user: cfg.name.clone(),
        });
    }
    let cname = CString::new(cfg.name.as_str()).map_err(|e| EngineUserError::Lookup {
        what: format!("user {:?}", cfg.name),
        reason: e.to_string(),
    })?;
    let mut groups: Vec<u32> = nix::unistd::getgrouplist(&cname, user.gid)
        .map_err(|e| lookup(&format!("the groups of {:?}", cfg.name), e))?
        .into_iter()
        .map(|g| g.as_raw())
        .collect();
    let (names, required): (Vec<String>, bool) = match &cfg.groups {
        Some(g) => (g.clone(), true),
        None => (GPU_GROUPS.iter().map(|g| g.to_string()).collect(), false),
    };
    for name in names {
        match Group::from_name(&name).map_err(|e| lookup(&format!("group {name:?}"), e))? {
            Some(g) => groups.push(g.gid.as_raw()),
            None if required => return Err(EngineUserError::NoGroup { group: name }),
            None => {}
        }
    }
    groups.sort_unstable();
    groups.dedup();
    Ok(Credentials {
        user: cfg.name.clone(),
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups,
        home: user.dir,
    })
}

/// The ids a child is switched to between fork and exec, prepared before the fork.
#[derive(Debug, Clone)]
pub(crate) struct SwitchIds {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

impl SwitchIds {
    pub(crate) fn of(c: &Credentials) -> SwitchIds {
        SwitchIds {
            uid: c.uid as libc::uid_t,
            gid: c.gid as libc::gid_t,
            groups: c.groups.iter().map(|&g| g as libc::gid_t).collect(),
        }
    }

    /// Switches this process: supplementary groups first (they need root), then all of real,
    /// effective and saved gid, then uid (the filesystem ids follow the effective ones). Only
    /// async-signal-safe calls on memory allocated before the fork: meant for `pre_exec`.
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        // SAFETY: plain system calls on a slice that outlives them.
        let failed = unsafe {
            libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0
                || libc::setresgid(self.gid, self.gid, self.gid) != 0
                || libc::setresuid(self.uid, self.uid, self.uid) != 0
        };
        if failed {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// `Err` naming the file when `creds` could read it by its mode bits (owner, group, other).
pub fn check_unreadable(field: &str, path: &Path, creds: &Credentials) -> Result<(), String> {
    let m = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = m.mode() & 0o777;
    let readable = mode & 0o004 != 0
        || (m.uid() == creds.uid && mode & 0o400 != 0)
        || ((m.gid() == creds.gid || creds.groups.contains(&m.gid())) && mode & 0o040 != 0);
    if readable {
        return Err(format!(
            "{} (mode {mode:04o}, owner {}:{}) is readable by the engine user {:?}, whose \
             engines must not read the agent's key: chmod 600 it, owned by the agent's user ({field})",
            path.display(),
            m.uid(),
            m.gid(),
            creds.user
        ));
    }
    Ok(())
}

/// The directories of the agent's data directory that must not be the engine user's to write:
/// the directory itself and what the agent makes in it (`runs` for logs, `s` for scratch).
const DATA_LEAVES: [&str; 2] = ["runs", "s"];

/// `Err` naming the directory and why, when the engine user could change what the root agent
/// finds in its data directory `dir`: write into it (or into `runs`, `s`), or replace it or any
/// directory above it (one it owns, or one it may write without the sticky bit). A root agent
/// follows the run logs' paths and signals the process group `engine.pgid` names, so a data
/// directory the engine user can write lets an engine point those at anything. Directories
/// that do not exist yet are skipped (the agent checks again after making them).
pub fn check_data_dir(dir: &Path, creds: &Credentials) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let in_group = |gid: u32| gid == creds.gid || creds.groups.contains(&gid);
    // Where the engine user can write or replace `path`, in words.
    let why = |path: &Path, leaf: bool| -> Option<String> {
        let m = std::fs::metadata(path).ok()?;
        let mode = m.permissions().mode() & 0o7777;
        let sticky = mode & 0o1000 != 0;
        let owner = m.uid() == creds.uid;
        let group = mode & 0o020 != 0 && in_group(m.gid());
        let world = mode & 0o002 != 0;
        let why = if owner {
            format!("is owned by the engine user {:?}", creds.user)
        } else if leaf && group {
            format!(
                "is writable by its group {}, one of the engine user's",
                m.gid()
            )
        } else if leaf && world {
            "is writable by every user".to_string()
        } else if !sticky && group {
            format!(
                "is writable by its group {}, one of the engine user's, without the sticky bit",
                m.gid()
            )
        } else if !sticky && world {
            "is writable by every user without the sticky bit".to_string()
        } else {
            return None;
        };
        Some(format!(
            "{} (mode {mode:04o}, owner {}:{}) {why}",
            path.display(),
            m.uid(),
            m.gid()
        ))
    };
    let mut leaves = vec![dir.to_path_buf()];
    leaves.extend(DATA_LEAVES.iter().map(|l| dir.join(l)));
    let real = std::fs::canonicalize(dir).ok();
    let mut above: Vec<PathBuf> = dir.ancestors().skip(1).map(Path::to_path_buf).collect();
    if let Some(r) = &real {
        leaves.push(r.clone());
        above.extend(r.ancestors().skip(1).map(Path::to_path_buf));
    }
    let found = leaves
        .iter()
        .find_map(|p| why(p, true))
        .or_else(|| above.iter().find_map(|p| why(p, false)));
    match found {
        None => Ok(()),
        Some(what) => Err(format!(
            "the data directory {}: {what}, so the engine user could plant files or links \
             where the agent (root) writes its logs and reads the engine's process group; \
             make it and every directory above it owned by root and not writable by {:?} \
             (e.g. chown root:root and chmod 0700 {})",
            dir.display(),
            creds.user,
            dir.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn mode_bits_decide_what_the_engine_user_reads() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("agent.key");
        std::fs::write(&f, "k").unwrap();
        let m = std::fs::metadata(&f).unwrap();
        let other = Credentials {
            user: "e".into(),
            uid: m.uid() + 1,
            gid: m.gid() + 1,
            groups: vec![],
            home: "/".into(),
        };
        for (mode, ok) in [(0o600, true), (0o400, true), (0o640, true), (0o604, false)] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(
                check_unreadable("tls.key", &f, &other).is_ok(),
                ok,
                "{mode:o}"
            );
        }
        // Group-readable and the engine user is in the file's group: refused, naming both.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let in_group = Credentials {
            groups: vec![m.gid()],
            ..other.clone()
        };
        let e = check_unreadable("tls.key", &f, &in_group).unwrap_err();
        assert!(e.contains("mode 0640") && e.contains("tls.key"), "{e}");
        // The owner itself.
        let owner = Credentials {
            uid: m.uid(),
            ..other
        };
        assert!(check_unreadable("tls.key", &f, &owner).is_err());
    }

    #[test]
    fn a_data_directory_the_engine_user_could_write_or_replace_is_named() {
        let top = tempfile::tempdir().unwrap();
        let parent = top.path().join("parent");
        let data = parent.join("data");
        std::fs::create_dir_all(data.join("runs")).unwrap();
        let m = std::fs::metadata(&data).unwrap();
        let other = Credentials {
            user: "e".into(),
            uid: m.uid() + 1,
            gid: m.gid() + 1,
            groups: vec![],
            home: "/".into(),
        };
        let set = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        set(&parent, 0o755);
        set(&data, 0o700);
        check_data_dir(&data, &other).unwrap();
        // The directory itself: world-writable, even with the sticky bit.
        for mode in [0o777, 0o1777] {
            set(&data, mode);
            let e = check_data_dir(&data, &other).unwrap_err();
            assert!(
                e.contains("writable by every user") && e.contains(&*data.to_string_lossy()),
                "{e}"
            );
        }
        set(&data, 0o700);
        // `runs` inside it, group-writable by one of the engine user's groups.
        set(&data.join("runs"), 0o770);
        let in_group = Credentials {
            groups: vec![m.gid()],
            ..other.clone()
        };
        let e = check_data_dir(&data, &in_group).unwrap_err();
        assert!(
            e.contains("runs") && e.contains("one of the engine user's"),
            "{e}"
        );
        check_data_dir(&data, &other).unwrap();
        set(&data.join("runs"), 0o700);
        // A directory above it that anyone may write (the data directory could be renamed
        // away and replaced), unless sticky.
        set(&parent, 0o777);
        let e = check_data_dir(&data, &other).unwrap_err();
        assert!(
            e.contains("without the sticky bit") && e.contains("parent"),
            "{e}"
        );
        set(&parent, 0o1777);
        check_data_dir(&data, &other).unwrap();
        set(&parent, 0o755);
        // Owned by the engine user.
        let owner = Credentials {
            uid: m.uid(),
            ..other.clone()
        };
        let e = check_data_dir(&data, &owner).unwrap_err();
        assert!(e.contains("owned by the engine user"), "{e}");
    }

    #[test]
    fn a_missing_user_or_group_is_named() {
        let cfg = EngineUserConfig {
            name: "fleetbench-no-such-user-x".into(),
            groups: None,
        };
        let e = resolve(&cfg, "vllm").unwrap_err().to_string();
        assert!(
            e.contains("fleetbench-no-such-user-x") && e.contains("[profiles.vllm]"),
            "{e}"
        );
        let cfg = EngineUserConfig {
            name: "root".into(),
            groups: None,
        };
        assert!(matches!(
            resolve(&cfg, "p"),
            Err(EngineUserError::IsRoot { .. })
        ));
        let cfg = EngineUserConfig {
            name: "nobody".into(),
            groups: Some(vec!["no-such-group-x".into()]),
        };
        if User::from_name("nobody").ok().flatten().is_some() {
            let e = resolve(&cfg, "p").unwrap_err().to_string();
            assert!(e.contains("no-such-group-x"), "{e}");
        }
    }
}
