//! `parse_args`: argparse-like parsing over the flag table.

use super::table::{
    ATTENTION_BACKENDS, Accepted, GRAPH_BACKENDS, KV_CACHE_DTYPES, Kind, choice, lookup,
};
use super::{ArgError, MOE_BACKEND_CHOICES, MoeBackend, SimArgs, StreamWrites};

fn num<T: std::str::FromStr>(flag: &str, value: &str, expected: &str) -> Result<T, ArgError> {
    value.parse().map_err(|_| ArgError::BadValue {
        flag: flag.to_string(),
        value: value.to_string(),
        expected: expected.to_string(),
    })
}

fn float_in(flag: &str, value: &str, lo: f64, hi: f64) -> Result<f64, ArgError> {
    let x: f64 = num(flag, value, "float")?;
    if !(x.is_finite() && x >= lo && x <= hi) {
        return Err(ArgError::BadValue {
            flag: flag.to_string(),
            value: value.to_string(),
            expected: format!("float in [{lo}, {hi}]"),
        });
    }
    Ok(x)
}

fn positive_int(flag: &str, value: &str) -> Result<u32, ArgError> {
    let x: u32 = num(flag, value, "int")?;
    if x == 0 {
        return Err(ArgError::BadValue {
            flag: flag.to_string(),
            value: value.to_string(),
            expected: "positive int".into(),
        });
    }
    Ok(x)
}

fn backend(flag: &str, value: &str) -> Result<MoeBackend, ArgError> {
    MoeBackend::parse(value).ok_or_else(|| ArgError::BadChoice {
        flag: flag.to_string(),
        value: value.to_string(),
        choices: MOE_BACKEND_CHOICES
            .iter()
            .map(|b| format!("'{b}'"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Parses the flags (without the program name).
pub fn parse_args(args: &[String]) -> Result<SimArgs, ArgError> {
    let mut out = SimArgs::default();
    let mut vllm = VllmGang::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "-h" || arg == "--help" {
            return Err(ArgError::HelpRequested);
        }
        if !arg.starts_with("--") {
            return Err(ArgError::UnknownFlag { flag: arg.clone() });
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let flag = lookup(name)?;
        let switch = matches!(flag.kind, Kind::Switch | Kind::Accept(Accepted::Switch));
        let value = match (switch, inline) {
            (true, Some(v)) => {
                return Err(ArgError::UnexpectedValue {
                    flag: flag.canonical.to_string(),
                    value: v,
                });
            }
            (true, None) => String::new(),
            (false, Some(v)) => v,
            (false, None) => match args.get(i) {
                Some(v) if !v.starts_with("--") || v.parse::<f64>().is_ok() => {
                    i += 1;
                    v.clone()
                }
                _ => {
                    return Err(ArgError::MissingValue {
                        flag: flag.canonical.to_string(),
                    });
                }
            },
        };
        let f = flag.canonical;
        let v = value.as_str();
        if let Kind::Accept(a) = flag.kind {
            match a {
                Accepted::Switch | Accepted::Str => {}
                Accepted::Int => {
                    num::<i64>(f, v, "int")?;
                }
                Accepted::Float => {
                    num::<f64>(f, v, "float")?;
                }
                Accepted::Choice(c) => choice(f, v, c)?,
            }
            let shown = if switch { "True".to_string() } else { value };
            out.accepted.push((f.to_string(), shown));
            continue;
        }
        match f {
            "--host" => out.host = value,
            "--port" => out.port = num(f, v, "int")?,
            "--model-path" => out.model_path = value,
            "--served-model-name" => out.served_model_name = Some(value),
            "--ttft-ms" => out.ttft_ms = Some(float_in(f, v, 0.0, 3.6e6)?),
            "--itl-ms" => out.itl_ms = Some(float_in(f, v, 0.0, 3.6e6)?),
            "--stream-writes" => {
                out.stream_writes = match v {
                    "per-token" => StreamWrites::PerToken,
                    "coalesced" => StreamWrites::Coalesced,
                    _ => {
                        return Err(ArgError::BadChoice {
                            flag: f.into(),
                            value,
                            choices: "'per-token', 'coalesced'".into(),
                        });
                    }
                }
            }
            "--max-running-requests" => out.max_running_requests = Some(positive_int(f, v)?),
            "--disable-cuda-graph" => out.disable_cuda_graph = true,
            // 0 is valid in SGLang: no decode batch is captured (the model then never uses a
            // graph, as `batch <= 0` never holds).
            "--cuda-graph-max-bs" => out.cuda_graph_max_bs = Some(num(f, v, "int")?),
            "--moe-runner-backend" => out.moe_runner_backend = backend(f, v)?,
            "--tp-size" => {
                let tp = positive_int(f, v)?;
                if !tp.is_power_of_two() || tp > 16 {
                    return Err(ArgError::BadValue {
                        flag: f.into(),
                        value,
                        expected: "power-of-two int <= 16".into(),
                    });
                }
                out.tp_size = tp;
            }
            "--mem-fraction-static" => out.mem_fraction_static = Some(float_in(f, v, 0.01, 1.0)?),
            "--chunked-prefill-size" => {
                let c: i64 = num(f, v, "int")?;
                if c == 0 || c < -1 {
                    return Err(ArgError::BadValue {
                        flag: f.into(),
                        value,
                        expected: "positive int or -1".into(),
                    });
                }
                out.chunked_prefill_size = Some(c);
            }
            "--max-prefill-tokens" => out.max_prefill_tokens = positive_int(f, v)?,
            "--context-length" => out.context_length = Some(positive_int(f, v)?),
            "--enable-metrics" => out.enable_metrics = true,
            "--attention-backend" => {
                choice(f, v, ATTENTION_BACKENDS)?;
                out.attention_backend = Some(value);
            }
            "--kv-cache-dtype" => {
                choice(f, v, KV_CACHE_DTYPES)?;
                out.kv_cache_dtype = value;
            }
            "--max-total-tokens" => out.max_total_tokens = Some(positive_int(f, v)?),
            "--stream-response-default-include-usage" => out.default_include_usage = true,
            "--stream-interval" => out.stream_interval = positive_int(f, v)?,
            "--cuda-graph-max-bs-decode" => out.cuda_graph_max_bs = Some(positive_int(f, v)?),
            "--cuda-graph-backend-decode" => {
                choice(f, v, GRAPH_BACKENDS)?;
                out.disable_cuda_graph = v == "disabled";
            }
            "--trust-remote-code" => out.trust_remote_code = true,
            "--log-level" => out.log_level = value,
            "--startup-delay-s" => out.startup_delay_s = float_in(f, v, 0.0, 86400.0)?,
            "--time-scale" => out.time_scale = float_in(f, v, 1e-6, 1e6)?,
            "--seed" => out.seed = num(f, v, "int")?,
            "--jitter" => out.jitter = float_in(f, v, 0.0, 0.5)?,
            "--slowdown" => out.slowdown = float_in(f, v, 0.01, 100.0)?,
            "--gpu-memory-gb" => out.gpu_memory_gb = float_in(f, v, 1.0, 10000.0)?,
            "--crash-above-batch" => out.crash_above_batch = Some(positive_int(f, v)?),
            "--crash-backend" => out.crash_backend = Some(backend(f, v)?),
            "--workers" => out.workers = Some(positive_int(f, v)? as usize),
            "--disable-radix-cache" => out.disable_radix_cache = true,
            "--fail-rate" => out.fail_rate = float_in(f, v, 0.0, 1.0)?,
            "--max-prompt-len" => out.max_prompt_len = Some(positive_int(f, v)?),
            "--decode-ms-per-1k-context" => {
                out.decode_ms_per_1k_context = float_in(f, v, 0.0, 1e4)?;
            }
            "--noise-seed" => out.noise_seed = Some(num(f, v, "int")?),
            "--nnodes" => out.nnodes = positive_int(f, v)?,
            "--node-rank" => out.node_rank = num(f, v, "int")?,
            "--dist-init-addr" => out.dist_init_addr = Some(value),
            "--dist-timeout" => out.dist_timeout_s = float_in(f, v, 0.1, 86400.0)?,
            "--data-parallel-address" => vllm.address = Some(value),
            "--data-parallel-rpc-port" => vllm.port = Some(num(f, v, "int")?),
            "--data-parallel-start-rank" => vllm.start_rank = Some(num(f, v, "int")?),
            "--data-parallel-size-local" => vllm.local = Some(positive_int(f, v)?),
            "--headless" => {}
            "--fault" => {
                let (kind, arg) = match v.split_once('=') {
                    Some((k, a)) => (k, Some(a.to_string())),
                    None => (v, None),
                };
                match kind {
                    "nan" => out.faults.nan = true,
                    "oom-at-start" => out.faults.oom_at_start = true,
                    "slow-start" => out.faults.slow_start = true,
                    "hang-on-peer-loss" => out.faults.hang_on_peer_loss = true,
                    "hang-after-requests" => {
                        let n = match arg {
                            Some(a) => a,
                            None => match args.get(i) {
                                Some(a) if !a.starts_with("--") => {
                                    i += 1;
                                    a.clone()
                                }
                                _ => {
                                    return Err(ArgError::MissingValue {
                                        flag: "--fault hang-after-requests".into(),
                                    });
                                }
                            },
                        };
                        out.faults.hang_after_requests =
                            Some(num("--fault hang-after-requests", &n, "int")?);
                    }
                    _ => {
                        return Err(ArgError::BadChoice {
                            flag: f.into(),
                            value,
                            choices: "'nan', 'oom-at-start', 'hang-after-requests N', \
                                      'slow-start', 'hang-on-peer-loss'"
                                .into(),
                        });
                    }
                }
            }
            other => unreachable!("flag table entry {other} without a handler"),
        }
    }
    vllm.apply(&mut out)?;
    check_gang(&out)?;
    Ok(out)
}

/// vLLM's spelling of a rank across nodes: `--data-parallel-size N --data-parallel-size-local 1
/// --data-parallel-address H --data-parallel-rpc-port P [--data-parallel-start-rank R
/// --headless]`, read as SGLang's `--nnodes N --node-rank R --dist-init-addr H:P` (one rank
/// per node: the only layout the simulator models).
#[derive(Default)]
struct VllmGang {
    address: Option<String>,
    port: Option<u16>,
    start_rank: Option<u32>,
    local: Option<u32>,
}

impl VllmGang {
    fn apply(self, out: &mut SimArgs) -> Result<(), ArgError> {
        let bad = |flag: &str, value: String, expected: &str| ArgError::BadValue {
            flag: flag.into(),
            value,
            expected: expected.into(),
        };
        let (address, port) = match (self.address, self.port) {
            (None, None) => return Ok(()),
            (Some(a), Some(p)) => (a, p),
            (a, _) => {
                let (flag, value) = match a {
                    Some(a) => ("--data-parallel-rpc-port", a),
                    None => ("--data-parallel-address", String::new()),
                };
                return Err(bad(
                    flag,
                    value,
                    "given with its pair (address and rpc port)",
                ));
            }
        };
        if out.dist_init_addr.is_some() {
            return Err(bad(
                "--data-parallel-address",
                address,
                "not both vLLM's and SGLang's rendezvous (--dist-init-addr)",
            ));
        }
        if let Some(local) = self.local.filter(|l| *l != 1) {
            return Err(bad(
                "--data-parallel-size-local",
                local.to_string(),
                "1 (one rank per node)",
            ));
        }
        let size = out
            .accepted
            .iter()
            .find(|(f, _)| f == "--dp-size")
            .map_or(Ok(1), |(_, v)| v.parse::<u32>())
            .map_err(|_| bad("--data-parallel-size", String::new(), "int"))?;
        out.nnodes = size.max(1);
        out.node_rank = self.start_rank.unwrap_or(0);
        out.dist_init_addr = Some(format!("{address}:{port}"));
        Ok(())
    }
}

/// The rendezvous flags must agree, as SGLang's `ServerArgs` checks them: a rank inside the
/// node count, and an address to meet at when there is more than one node.
fn check_gang(out: &SimArgs) -> Result<(), ArgError> {
    if out.node_rank >= out.nnodes {
        return Err(ArgError::BadValue {
            flag: "--node-rank".into(),
            value: out.node_rank.to_string(),
            expected: format!("int below --nnodes {}", out.nnodes),
        });
    }
    if out.nnodes > 1 {
        let addr = out.dist_init_addr.as_deref().unwrap_or("");
        let ok = addr
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            return Err(ArgError::BadValue {
                flag: "--dist-init-addr".into(),
                value: addr.to_string(),
                expected: format!("HOST:PORT (required with --nnodes {})", out.nnodes),
            });
        }
    }
    Ok(())
}
