//! Checking a caller's `EngineSpec` against a profile and building its argv: the model and
//! env allowlists, the flag rules (the profile's own, or the engine's argument list read on
//! first use), the port and the URLs the agent will probe. Nothing starts here.

use std::collections::BTreeMap;

use fleetbench_engines::flags::{FlagError, FlagPolicy};
use fleetbench_proto::agentpb;

use crate::allow::MAX_ENV_VARS;

use super::{LaunchPlan, Profile, RequestError, resolve_program};

impl Profile {
    /// Checks `spec` against this profile and the engine's own argument list (read on first
    /// use of the program file, see `engine_args`), and builds the argv. Nothing starts here.
    /// The engine's argument list is read as the engine will run: as `run_as` (`None`: the
    /// agent's own user), without the `withheld` variables.
    pub async fn plan_checked(
        &self,
        spec: &agentpb::EngineSpec,
        run_as: Option<&crate::engine_user::Credentials>,
        withheld: &[String],
    ) -> Result<LaunchPlan, RequestError> {
        let program = resolve_program(&self.program).map_err(|reason| RequestError::Program {
            program: self.program.clone(),
            profile: self.name.clone(),
            reason,
        })?;
        let eff = self
            .engine_args
            .effective(
                &program,
                &self.flags,
                self.help_args.as_deref(),
                &self.pass_through,
                &self.env,
                crate::engine_args::ProbeAs { run_as, withheld },
            )
            .await;
        let mut plan = self.plan_with(spec, &eff.flags)?;
        plan.run_as = run_as.cloned();
        plan.withheld_env = withheld.to_vec();
        Ok(plan)
    }

    /// Checks `spec` against this profile's rules alone (the engine is not asked).
    pub fn plan(&self, spec: &agentpb::EngineSpec) -> Result<LaunchPlan, RequestError> {
        let mut flags = self.flags.clone();
        // Validated when the profile was loaded.
        let _ = flags.pass_through_unread(&self.pass_through);
        self.plan_with(spec, &flags)
    }

    fn plan_with(
        &self,
        spec: &agentpb::EngineSpec,
        flags: &FlagPolicy,
    ) -> Result<LaunchPlan, RequestError> {
        let program = resolve_program(&self.program).map_err(|reason| RequestError::Program {
            program: self.program.clone(),
            profile: self.name.clone(),
            reason,
        })?;
        let model = spec.model.trim();
        let needs_model = self.args.iter().any(|a| a.contains("{model}"));
        if model.is_empty() && needs_model {
            return Err(RequestError::MissingModel {
                profile: self.name.clone(),
            });
        }
        if !model.is_empty()
            && let Err(why) = self.models.check(model)
        {
            return Err(RequestError::ModelNotAllowed {
                model: model.chars().take(200).collect(),
                profile: self.name.clone(),
                allowed: format!(": {why} (allowed: {})", self.models.describe()),
            });
        }
        let port = if spec.port == 0 {
            self.port
        } else {
            u16::try_from(spec.port).unwrap_or(0)
        };
        if port == 0 {
            return Err(RequestError::Flag(FlagError::BadValue {
                flag: "port".into(),
                expected: "a TCP port 1-65535".into(),
                got: spec.port.to_string(),
            }));
        }
        let workers = self.workers(spec)?;
        let metrics_port = self.metrics_port.unwrap_or(port);
        let subst = |a: &str| {
            a.replace("{port}", &port.to_string())
                .replace("{metrics_port}", &metrics_port.to_string())
                .replace("{model}", model)
                .replace("{host}", &self.host)
        };
        // `{workers}` stands for as many arguments as there are workers.
        let fixed: Vec<String> = self
            .args
            .iter()
            .flat_map(|a| match a.as_str() {
                "{workers}" => workers.clone(),
                a => vec![subst(a)],
            })
            .collect();

        // The engine's list may add spellings of a pinned setting: pins are resolved with it.
        let mut pinned = flags.pinned(&self.args);
        pinned.extend(self.pinned.iter().cloned());
        // A rendezvous is the controller's to choose (`spec.gang`), never a caller flag's: the
        // kind's rendezvous flags are pinned whether or not this run is a rank, and so is every
        // flag the gang adds.
        let rendezvous: Vec<String> = fleetbench_engines::gang::gang_pins(self.kind)
            .iter()
            .map(|f| f.to_string())
            .collect();
        pinned.extend(flags.pinned(&rendezvous));
        let gang_args = match &spec.gang {
            None => Vec::new(),
            Some(g) => fleetbench_engines::gang::gang_args(
                self.kind,
                &fleetbench_engines::gang::Gang {
                    nnodes: g.nnodes,
                    node_rank: g.node_rank,
                    dist_init_addr: g.dist_init_addr.clone(),
                },
            )?,
        };
        pinned.extend(flags.pinned(&gang_args));
        let checked = flags.check_all(
            spec.flags
                .iter()
                .map(|f| (f.name.as_str(), f.value.as_deref())),
            &pinned,
        )?;
        let mut flags: Vec<(String, Option<String>)> = Vec::new();
        let mut flag_args: Vec<String> = Vec::new();
        for c in checked {
            // The canonical name, so the engine sees exactly the flag that was checked.
            flag_args.push(c.canonical.clone());
            flag_args.extend(c.value.clone());
            flags.push((c.canonical, c.value));
        }

        if spec.env.len() > MAX_ENV_VARS {
            return Err(RequestError::TooManyEnv(spec.env.len()));
        }
        let mut env = self.env.clone();
        let mut spec_env: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in &spec.env {
            let Some(rule) = self.allowed_env.iter().find(|r| &r.name == k) else {
                return Err(RequestError::EnvNotAllowed {
                    var: k.chars().take(200).collect(),
                    profile: self.name.clone(),
                    allowed: if self.allowed_env.is_empty() {
                        "none".into()
                    } else {
                        self.allowed_env
                            .iter()
                            .map(|r| r.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                });
            };
            rule.check(v).map_err(|expected| RequestError::EnvValue {
                var: k.clone(),
                expected,
                got: v.chars().take(200).collect(),
            })?;
            spec_env.insert(k.clone(), v.clone());
            env.insert(k.clone(), v.clone());
        }

        let mut argv = vec![program.to_string_lossy().into_owned()];
        argv.extend(fixed);
        argv.extend(flag_args);
        argv.extend(gang_args);
        let base_url = format!("http://{}:{port}", url_host(&self.host));
        let metrics_base = format!("http://{}:{metrics_port}", url_host(&self.host));
        // Where the replicas run is placement, not configuration: not in the config's identity.
        let config_id = fleetbench_engines::config_id(self.kind, model, &flags, &spec_env);
        let mut spec = spec.clone();
        spec.port = u32::from(port);
        spec.workers = workers;
        Ok(LaunchPlan {
            withheld_env: Vec::new(),
            profile: self.name.clone(),
            kind: self.kind,
            argv,
            env,
            host: self.host.clone(),
            port,
            health_url: format!("{base_url}{}", self.health_path),
            metrics_url: self
                .metrics_path
                .as_ref()
                .map(|p| format!("{metrics_base}{p}")),
            base_url,
            stop_signal: self.stop_signal,
            grace: self.grace,
            start_timeout: self.start_timeout,
            config_id,
            spec,
            run_as: None,
        })
    }
}

impl Profile {
    /// The caller's workers, each checked against `allowed_workers` and written as its
    /// canonical origin (as the router labels its metrics); only a router takes any.
    fn workers(&self, spec: &agentpb::EngineSpec) -> Result<Vec<String>, RequestError> {
        let refuse = |field: String, message: String| RequestError::Workers { field, message };
        if !self.router {
            if spec.workers.is_empty() {
                return Ok(Vec::new());
            }
            return Err(refuse(
                "workers".into(),
                format!(
                    "profile {:?} runs {}, not a router: it takes no workers",
                    self.name, self.kind
                ),
            ));
        }
        if spec.workers.is_empty() && self.args.iter().any(|a| a == "{workers}") {
            return Err(refuse(
                "workers".into(),
                format!(
                    "profile {:?} is a router: name at least one worker",
                    self.name
                ),
            ));
        }
        if spec.workers.len() > MAX_WORKERS {
            return Err(refuse(
                "workers".into(),
                format!("at most {MAX_WORKERS}, got {}", spec.workers.len()),
            ));
        }
        let mut out: Vec<String> = Vec::new();
        for (i, w) in spec.workers.iter().enumerate() {
            let field = format!("workers[{i}]");
            let shown: String = w.chars().take(200).collect();
            let o = crate::external::origin(w).map_err(|m| refuse(field.clone(), m))?;
            if w.trim_end_matches('/').matches('/').count() > 2 {
                return Err(refuse(
                    field,
                    format!("{shown:?}: a worker is a base URL, scheme://host:port"),
                ));
            }
            if !self.allowed_workers.contains(&o) {
                return Err(refuse(
                    field,
                    format!(
                        "{o} is not an allowed worker of profile {:?} (allowed_workers: {})",
                        self.name,
                        if self.allowed_workers.is_empty() {
                            "none".to_string()
                        } else {
                            self.allowed_workers.join(", ")
                        }
                    ),
                ));
            }
            if out.contains(&o) {
                return Err(refuse(field, format!("{o} is named twice")));
            }
            out.push(o);
        }
        Ok(out)
    }
}

/// Workers one router may be given at most.
const MAX_WORKERS: usize = 256;

fn url_host(host: &str) -> String {
    match host {
        "0.0.0.0" => "127.0.0.1".into(),
        "::" => "[::1]".into(),
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
        h => h.to_string(),
    }
}
