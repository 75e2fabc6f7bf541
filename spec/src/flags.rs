//! Checks a config's flags against the engine kind's built-in flag rules
//! (`fleetbench_engines::flags`), the same rules the agent applies, so that a typo is refused
//! before any engine restarts.

use fleetbench_engines::EngineKind;
use fleetbench_engines::flags::{FlagError, FlagPolicy, FlagType, builtin_rules, check_flag};

use super::walk::suggest;

/// Why a flag was refused, worded for a spec error.
pub(crate) struct Problem {
    /// The flag's name is wrong (else its value).
    pub(crate) about_name: bool,
    pub(crate) message: String,
}

/// A kind without built-in rules (`generic`) has its flags listed by its agent profile, so any
/// flag passes here. A config that names its own `profile` may use flags that profile adds or passes
/// through: an unknown name, or a choice the tables do not know, is then left to the agent;
/// other values of known flags are still checked.
pub(crate) fn check(
    kind: EngineKind,
    default_profile: bool,
    name: &str,
    value: Option<&str>,
) -> Result<(), Problem> {
    if fleetbench_engines::flags::builtin_rules(kind).is_empty() {
        return Ok(());
    }
    // The rendezvous of an engine spanning hosts is the controller's (`nodes`), under any
    // profile: the agent refuses these flags too.
    let bare = name.split_once('=').map_or(name, |(n, _)| n);
    if fleetbench_engines::gang::gang_pins(kind).contains(&bare) {
        return Err(Problem {
            about_name: true,
            message: format!(
                "{bare} is set by the controller for each rank of a config with nodes > 1; \
                 a config gives nodes, never the rendezvous flags"
            ),
        });
    }
    // A router's upstreams are the controller's (the deployment's replicas), under any
    // spelling the router takes: the agent refuses these flags too.
    let workers = fleetbench_engines::defaults(kind).worker_flags;
    if let Some(w) = workers
        .iter()
        .find(|w| bare == **w || (bare.len() > 2 && w.starts_with(bare)))
    {
        return Err(Problem {
            about_name: true,
            message: format!(
                "{w} is set by the controller: a router's workers are its config's replicas \
                 (replicas = N), placed on hosts its profile allowlists"
            ),
        });
    }
    // A risky flag (remote code, JSON configs, loaders) is off on the built-in profile: say so
    // and how to turn it on, rather than "not a flag".
    if let Err(e @ FlagError::Gated { .. }) =
        FlagPolicy::builtin(kind).check(name, value, &Default::default())
    {
        return if default_profile {
            Err(Problem {
                about_name: true,
                message: e.to_string(),
            })
        } else {
            Ok(())
        };
    }
    let rules = builtin_rules(kind);
    let is_choice = |n: &str| {
        rules
            .iter()
            .any(|r| r.name == n && matches!(r.ty, FlagType::Choice { .. }))
    };
    match check_flag(&rules, name, value) {
        Ok(()) => Ok(()),
        Err(FlagError::NotAllowed { .. }) if !default_profile => Ok(()),
        // A profile of its own may pass the flag through, typed from the engine's own list:
        // an upstream value newer than the tables is then the agent's to judge.
        Err(FlagError::BadValue { .. })
            if !default_profile && value.is_some() && is_choice(name) =>
        {
            Ok(())
        }
        Err(FlagError::NotAllowed { .. })
            if fleetbench_engines::flags::replacement(kind, name).is_some() =>
        {
            let r = fleetbench_engines::flags::replacement(kind, name).unwrap_or_default();
            Err(Problem {
                about_name: true,
                message: format!("deprecated by engine {kind}: use {r}"),
            })
        }
        Err(FlagError::NotAllowed { .. }) => {
            let hint = match suggest(name, rules.iter().map(|r| r.name.as_str())) {
                Some(s) => format!("did you mean {s:?}?"),
                None => "a profile of its own in the agent's config can allow more".to_string(),
            };
            Err(Problem {
                about_name: true,
                message: format!("not a flag engine {kind} accepts ({hint})"),
            })
        }
        Err(FlagError::BadValue { expected, got, .. }) => {
            let got = match value {
                None => "true (a switch)".to_string(),
                Some(_) => format!("{got:?}"),
            };
            let choices = rules
                .iter()
                .find(|r| r.name == name)
                .and_then(|r| match &r.ty {
                    FlagType::Choice { values } => Some(values),
                    _ => None,
                });
            let near = value
                .zip(choices)
                .and_then(|(v, cs)| suggest(v, cs.iter().map(String::as_str)));
            let hint = match near {
                Some(n) => format!(" (did you mean {n:?}?)"),
                None if value.is_some() && expected.contains("switch") => {
                    " (write true to switch it on)".to_string()
                }
                None => String::new(),
            };
            Err(Problem {
                about_name: false,
                message: format!("expected {expected}, got {got}{hint}"),
            })
        }
        Err(other) => Err(Problem {
            about_name: true,
            message: other.to_string(),
        }),
    }
}
