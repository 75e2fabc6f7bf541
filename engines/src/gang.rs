//! One engine spanning hosts (a "gang"): the rendezvous a controller chooses for each rank,
//! turned into the engine's own flags by the engine's module (`Engine::gang_args`).
//!
//! The rendezvous is never the user's: a config says how many nodes it spans, the controller
//! picks rank 0's address and port and each rank's number, and the agent adds the flags. The
//! flags that carry it are pinned for every config of a kind that spans hosts (a user flag
//! named like one is refused as set by the agent), so a spec cannot point ranks at another
//! rendezvous or run a rank alone.

use crate::EngineKind;

/// One rank's place in a gang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gang {
    /// How many nodes (hosts, one rank process each) the engine spans; at least 2.
    pub nnodes: u32,
    /// This rank, `0..nnodes`; rank 0 serves the API.
    pub node_rank: u32,
    /// `HOST:PORT` where rank 0 meets the others.
    pub dist_init_addr: String,
}

/// Why a gang cannot be started with this kind or these values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GangError {
    /// The engine cannot span hosts.
    #[error(
        "engine kind {kind} cannot span hosts ({why}): a gang (nodes > 1) needs sglang, vllm or sim"
    )]
    Unsupported { kind: EngineKind, why: &'static str },
    /// The values do not make a gang.
    #[error("gang {field}: {problem}")]
    Bad {
        field: &'static str,
        problem: String,
    },
}

impl Gang {
    /// Checks the values every engine needs: 2+ nodes, a rank below them, `HOST:PORT`.
    pub fn check(&self) -> Result<(), GangError> {
        if self.nnodes < 2 {
            return Err(GangError::Bad {
                field: "nnodes",
                problem: format!("{} (a gang spans 2 nodes or more)", self.nnodes),
            });
        }
        if self.node_rank >= self.nnodes {
            return Err(GangError::Bad {
                field: "node_rank",
                problem: format!("{} is not below nnodes {}", self.node_rank, self.nnodes),
            });
        }
        if self.host_port().is_none() {
            return Err(GangError::Bad {
                field: "dist_init_addr",
                problem: format!("{:?} is not HOST:PORT", self.dist_init_addr),
            });
        }
        Ok(())
    }

    /// Rank 0's host and port.
    pub fn host_port(&self) -> Option<(&str, u16)> {
        let (h, p) = self.dist_init_addr.rsplit_once(':')?;
        let p: u16 = p.parse().ok().filter(|p| *p > 0)?;
        let h = h.trim_start_matches('[').trim_end_matches(']');
        (!h.is_empty() && !h.chars().any(|c| c.is_whitespace() || c.is_control())).then_some((h, p))
    }
}

/// The engine flags that place this rank in its gang (after the caller's own flags).
pub fn gang_args(kind: EngineKind, gang: &Gang) -> Result<Vec<String>, GangError> {
    gang.check()?;
    crate::engine::spec(kind).gang_args(gang)
}

/// The flags that carry a rendezvous for `kind`: never a user's to give.
pub fn gang_pins(kind: EngineKind) -> &'static [&'static str] {
    crate::engine::spec(kind).gang_pins()
}

/// Whether `kind` can span hosts at all.
pub fn spans_hosts(kind: EngineKind) -> bool {
    let probe = Gang {
        nnodes: 2,
        node_rank: 0,
        dist_init_addr: "127.0.0.1:1".into(),
    };
    crate::engine::spec(kind).gang_args(&probe).is_ok()
}

/// SGLang's spelling (the simulator's too): `--nnodes N --node-rank R --dist-init-addr H:P`.
pub(crate) fn sglang_args(g: &Gang) -> Vec<String> {
    vec![
        "--nnodes".into(),
        g.nnodes.to_string(),
        "--node-rank".into(),
        g.node_rank.to_string(),
        "--dist-init-addr".into(),
        g.dist_init_addr.clone(),
    ]
}

/// SGLang's rendezvous flags.
pub(crate) const SGLANG_PINS: &[&str] = &["--nnodes", "--node-rank", "--dist-init-addr"];

#[cfg(test)]
mod tests {
    use super::*;

    fn g(rank: u32) -> Gang {
        Gang {
            nnodes: 2,
            node_rank: rank,
            dist_init_addr: "10.0.0.1:5000".into(),
        }
    }

    #[test]
    fn each_kind_spells_its_rendezvous_or_refuses() {
        assert_eq!(
            gang_args(EngineKind::Sglang, &g(1)).unwrap().join(" "),
            "--nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:5000"
        );
        assert_eq!(
            gang_args(EngineKind::Sim, &g(0)).unwrap(),
            gang_args(EngineKind::Sglang, &g(0)).unwrap()
        );
        let head = gang_args(EngineKind::Vllm, &g(0)).unwrap().join(" ");
        assert!(
            head.contains("--data-parallel-address 10.0.0.1")
                && head.contains("--data-parallel-rpc-port 5000")
                && head.contains("--data-parallel-size 2")
                && !head.contains("--headless"),
            "{head}"
        );
        let other = gang_args(EngineKind::Vllm, &g(1)).unwrap().join(" ");
        assert!(
            other.contains("--headless") && other.contains("--data-parallel-start-rank 1"),
            "{other}"
        );
        for kind in [EngineKind::Llamacpp, EngineKind::Generic] {
            let e = gang_args(kind, &g(0)).unwrap_err().to_string();
            assert!(
                e.contains(kind.as_str()) && e.contains("cannot span hosts"),
                "{e}"
            );
            assert!(!spans_hosts(kind));
        }
        assert!(spans_hosts(EngineKind::Sim) && spans_hosts(EngineKind::Vllm));
    }

    #[test]
    fn every_generated_flag_is_pinned() {
        for kind in [EngineKind::Sglang, EngineKind::Sim, EngineKind::Vllm] {
            for a in gang_args(kind, &g(1)).unwrap() {
                if a.starts_with("--") && a != "--data-parallel-size" {
                    assert!(gang_pins(kind).contains(&a.as_str()), "{kind}: {a}");
                }
            }
        }
    }

    #[test]
    fn bad_values_name_the_field() {
        let mut x = g(2);
        assert!(
            gang_args(EngineKind::Sim, &x)
                .unwrap_err()
                .to_string()
                .contains("node_rank")
        );
        x.node_rank = 0;
        x.nnodes = 1;
        assert!(
            gang_args(EngineKind::Sim, &x)
                .unwrap_err()
                .to_string()
                .contains("nnodes")
        );
        x.nnodes = 2;
        x.dist_init_addr = "nohost".into();
        let e = gang_args(EngineKind::Sim, &x).unwrap_err().to_string();
        assert!(e.contains("dist_init_addr"), "{e}");
    }
}
