//! The deployment files parse and hang together: compose (YAML, mounted files exist, the
//! collector's pipelines use only receivers/processors/exporters it defines, Prometheus scrapes
//! the port the controller serves), systemd units (INI: sections, hardening, config files that
//! exist, writable HOME and caches). The Helm chart and the images have their own tests
//! (`helm_chart.rs`, `images.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_norway::Value;

fn deploy() -> PathBuf {
    fleetbench_testkit::repo_root().join("deploy")
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

fn s<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {v:?}"))
}

#[test]
fn every_yaml_file_under_deploy_parses() {
    let mut count = 0;
    let mut stack = vec![deploy()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            // Helm templates are Go templates, not YAML (helm_chart.rs renders them).
            if p.is_dir() && !p.ends_with("templates") {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                assert!(!yaml_docs(&p).is_empty(), "{}: empty", p.display());
                count += 1;
            }
        }
    }
    assert!(count >= 8, "only {count} YAML files");
}

#[test]
fn compose_services_and_mounted_files() {
    let dir = deploy().join("compose");
    let c = yaml(&dir.join("docker-compose.yaml"));
    let services = c["services"].as_mapping().expect("services");
    let names: BTreeSet<&str> = services.keys().map(|k| s(k, "service name")).collect();
    for want in [
        "otel-collector",
        "prometheus",
        "tempo",
        "grafana",
        "controller",
        "postgres",
    ] {
        assert!(names.contains(want), "compose lacks {want}: {names:?}");
    }
    for (name, svc) in services {
        let name = s(name, "service");
        for v in svc["volumes"].as_sequence().into_iter().flatten() {
            let spec = s(v, "volume");
            let src = spec.split(':').next().unwrap();
            if src.starts_with('.') {
                let p = dir.join(src);
                assert!(
                    p.exists(),
                    "{name}: mounted {src} does not exist ({})",
                    p.display()
                );
            } else {
                let named = c["volumes"].as_mapping().expect("named volumes");
                assert!(named.contains_key(src), "{name}: volume {src} not declared");
            }
        }
        if let Some(b) = svc.get("build") {
            let ctx = dir.join(s(&b["context"], "build context"));
            assert!(
                ctx.join(s(&b["dockerfile"], "dockerfile")).exists(),
                "{name}: Dockerfile"
            );
        }
    }
    let grafana_env = &services[&Value::from("grafana")]["environment"];
    let home = s(
        &grafana_env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"],
        "home dashboard",
    );
    let file = home.rsplit('/').next().unwrap();
    assert!(
        fleetbench_testkit::repo_root()
            .join("dashboards")
            .join(file)
            .exists(),
        "{home}"
    );
}

/// The certificate files a `cp fleet-certs/{a,b,…} …` line of `doc` copies, after `marker`.
fn copied_certs(doc: &str, marker: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(fleetbench_testkit::repo_root().join(doc)).unwrap();
    let from = text
        .find(marker)
        .unwrap_or_else(|| panic!("{doc}: no {marker:?}"));
    let line = text[from..]
        .lines()
        .find(|l| l.contains("fleet-certs/{"))
        .unwrap_or_else(|| panic!("{doc}: no copy line after {marker:?}"));
    let list = line.split("fleet-certs/{").nth(1).unwrap();
    list[..list.find('}').unwrap()]
        .split(',')
        .map(str::to_string)
        .collect()
}

#[test]
fn compose_docs_copy_one_list_of_certificates_that_the_stack_can_read() {
    // The compose README and docs/deploy.md once named different files (one lacked the
    // controller's client certificate, the other Prometheus' viewer): one list now, and it
    // holds every certificate file the stack's configs read.
    let readme = copied_certs("deploy/compose/README.md", "# fleetbench with");
    let docs = copied_certs("docs/deploy.md", "## 3. docker compose");
    assert_eq!(
        readme, docs,
        "deploy/compose/README.md and docs/deploy.md differ"
    );
    let dir = deploy().join("compose");
    for (file, mount) in [
        ("controller/controller.toml", "/etc/fleetbench/tls/"),
        ("prometheus/prometheus.yml", "/etc/prometheus/tls/"),
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for part in text.split(mount).skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
                .collect();
            assert!(
                docs.contains(&name),
                "{file} reads {mount}{name}, which no doc copies"
            );
        }
    }
    assert!(
        !docs.contains("ca.key"),
        "the CA key never leaves the operator's machine"
    );
    // The keys stay 0600: the controller runs as their owner.
    let c = yaml(&dir.join("docker-compose.yaml"));
    let user = s(&c["services"]["controller"]["user"], "controller user");
    assert!(
        user.starts_with("${FLEETBENCH_UID:?") && user.contains(":${FLEETBENCH_GID:?"),
        "{user}"
    );
}

#[test]
fn collector_pipelines_use_defined_components_and_reach_tempo_and_prometheus() {
    let cfg = yaml(&deploy().join("compose/otelcol/config.yaml"));
    let defined = |section: &str| -> BTreeSet<String> {
        cfg[section]
            .as_mapping()
            .map(|m| m.keys().map(|k| s(k, section).to_string()).collect())
            .unwrap_or_default()
    };
    let (receivers, processors, exporters) = (
        defined("receivers"),
        defined("processors"),
        defined("exporters"),
    );
    let mut used: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let pipelines = cfg["service"]["pipelines"]
        .as_mapping()
        .expect("service.pipelines");
    for (name, p) in pipelines {
        let name = s(name, "pipeline");
        for (kind, set) in [
            ("receivers", &receivers),
            ("processors", &processors),
            ("exporters", &exporters),
        ] {
            let list = p[kind]
                .as_sequence()
                .unwrap_or_else(|| panic!("{name}: no {kind}"));
            assert!(
                !list.is_empty() || kind == "processors",
                "{name}: empty {kind}"
            );
            for c in list {
                let c = s(c, kind).to_string();
                assert!(
                    set.contains(&c),
                    "pipeline {name} uses {kind} {c}, not defined ({set:?})"
                );
                used.entry(kind).or_default().insert(c);
            }
        }
    }
    let used_receivers = used.remove("receivers").unwrap_or_default();
    let used_exporters = used.remove("exporters").unwrap_or_default();
    assert_eq!(used_receivers, receivers, "every receiver is used");
    for e in &exporters {
        assert!(
            used_exporters.contains(e) || e == "debug",
            "exporter {e} is defined but unused"
        );
    }
    for ext in cfg["service"]["extensions"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        assert!(
            defined("extensions").contains(s(ext, "extension")),
            "extension {ext:?}"
        );
    }
    let endpoint_of = |pipeline: &str| -> Vec<String> {
        pipelines[&Value::from(pipeline)]["exporters"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|e| s(&cfg["exporters"][s(e, "exporter")]["endpoint"], "endpoint").to_string())
            .collect()
    };
    assert!(
        endpoint_of("traces")
            .iter()
            .any(|e| e.starts_with("tempo:")),
        "traces go to Tempo"
    );
    assert!(
        endpoint_of("metrics")
            .iter()
            .any(|e| e.starts_with("http://prometheus:9090/")),
        "metrics go to Prometheus"
    );
    assert!(receivers.contains("otlp"));
    assert!(
        cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
            .as_str()
            .is_some_and(|e| e.ends_with(":4317"))
    );
}

#[test]
fn prometheus_scrapes_the_port_the_controller_serves() {
    let dir = deploy().join("compose");
    let prom = yaml(&dir.join("prometheus/prometheus.yml"));
    let targets: Vec<String> = prom["scrape_configs"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|j| {
            j["static_configs"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|sc| sc["targets"].as_sequence().cloned().unwrap_or_default())
        .map(|t| s(&t, "target").to_string())
        .collect();
    // The compose API is mTLS only: the config names the certificates `fleetbench certs init`
    // writes, mounted at /etc/fleetbench/tls. Loaded against a freshly issued set.
    let text = std::fs::read_to_string(dir.join("controller/controller.toml")).unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("tls = {"))
            && !text.lines().any(|l| l.starts_with("token")),
        "the compose API listens beyond loopback: mTLS, no token"
    );
    let tmp = tempfile::tempdir().unwrap();
    fleetbench_support::tls::init_certs(
        tmp.path(),
        &fleetbench_support::tls::InitOptions::default(),
    )
    .unwrap();
    let conf = tmp.path().join("controller.toml");
    let tls_dir = format!("{}/", tmp.path().display());
    std::fs::write(&conf, text.replace("/etc/fleetbench/tls/", &tls_dir)).unwrap();
    let controller = fleetbench_controller::ControllerConfig::load(Some(&conf))
        .expect("compose controller.toml is a valid controller config");
    // /metrics listens on the compose network: viewers only, over HTTPS, and Prometheus
    // scrapes it with the viewer certificate `certs init` writes, checking the server's name.
    assert_eq!(
        controller.metrics.auth,
        fleetbench_controller::config::MetricsAuth::Viewer
    );
    assert!(controller.metrics.tls.is_some());
    let job = prom["scrape_configs"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|j| j["job_name"] == "fleetbench-controller")
        .expect("controller scrape job");
    assert_eq!(s(&job["scheme"], "scheme"), "https");
    let mounted = |p: &str| {
        let file = p
            .strip_prefix("/etc/prometheus/tls/")
            .expect("mounted tls dir");
        assert!(
            tmp.path().join(file).exists(),
            "certs init writes no {file}"
        );
    };
    for k in ["ca_file", "cert_file", "key_file"] {
        mounted(s(&job["tls_config"][k], k));
    }
    assert_eq!(
        s(&job["tls_config"]["cert_file"], "cert"),
        "/etc/prometheus/tls/viewer.pem"
    );
    assert_eq!(
        s(&job["tls_config"]["server_name"], "server_name"),
        "fleetbench-controller",
        "the name controller-server.pem carries"
    );
    let port = controller
        .metrics_listen
        .expect("metrics_listen set")
        .port();
    assert!(
        targets.contains(&format!("controller:{port}")),
        "{targets:?}"
    );
    // The controller's API port is the one compose publishes.
    let c = yaml(&dir.join("docker-compose.yaml"));
    let ports: Vec<String> = c["services"]["controller"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| s(p, "port").to_string())
        .collect();
    assert!(
        ports.contains(&format!("{0}:{0}", controller.listen.port())),
        "{ports:?}"
    );
    assert!(ports.contains(&format!("{port}:{port}")), "{ports:?}");
    let tempo = yaml(&dir.join("tempo/tempo.yaml"));
    assert_eq!(tempo["server"]["http_listen_port"].as_u64(), Some(3200));
}

/// `[Section]` → key → values (a key may repeat).
fn parse_unit(path: &Path) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut section: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_string());
            out.entry(name.to_string()).or_default();
            continue;
        }
        let sec = section
            .as_ref()
            .unwrap_or_else(|| panic!("{}:{}: key outside a section", path.display(), i + 1));
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{}:{}: not key=value: {raw}", path.display(), i + 1));
        assert!(
            !k.trim().is_empty() && k.trim().chars().all(|c| c.is_ascii_alphanumeric()),
            "{}:{}: bad key {k:?}",
            path.display(),
            i + 1
        );
        out.get_mut(sec)
            .unwrap()
            .entry(k.trim().to_string())
            .or_default()
            .push(v.trim().to_string());
    }
    out
}

#[test]
fn systemd_units_are_hardened_and_name_existing_configs() {
    let dir = deploy().join("systemd");
    for (unit, user, binary, config) in [
        (
            "fleetbench-agent.service",
            "fleetbench-agent",
            "fleetbench-agent",
            "agent.toml",
        ),
        (
            "fleetbench-controller.service",
            "fleetbench",
            "fleetbench-controller",
            "controller.toml",
        ),
    ] {
        let u = parse_unit(&dir.join(unit));
        for sec in ["Unit", "Service", "Install"] {
            assert!(u.contains_key(sec), "{unit}: no [{sec}]");
        }
        let svc = &u["Service"];
        let one = |k: &str| -> &str {
            svc.get(k)
                .and_then(|v| v.last())
                .map(String::as_str)
                .unwrap_or_else(|| panic!("{unit}: no {k}"))
        };
        assert_eq!(one("User"), user, "{unit}: own user");
        assert_eq!(one("NoNewPrivileges"), "yes", "{unit}");
        assert_eq!(one("Restart"), "on-failure", "{unit}");
        assert_eq!(one("ProtectSystem"), "strict", "{unit}");
        assert_eq!(one("CapabilityBoundingSet"), "", "{unit}: no capabilities");
        if binary == "fleetbench-agent" {
            // The GPUs stay reachable on systemd 249-251: there ProtectClock=yes implies a
            // device allowlist that closes /dev/nvidia*; the clock is guarded by the system-call
            // filter instead. Nothing else may restrict devices either.
            assert_ne!(
                svc.get("ProtectClock")
                    .and_then(|v| v.last())
                    .map(String::as_str),
                Some("yes"),
                "{unit}: ProtectClock=yes hides the GPUs before systemd 252"
            );
            assert!(
                svc.get("SystemCallFilter")
                    .into_iter()
                    .flatten()
                    .any(|f| f.split_whitespace().any(|w| w == "~@clock")),
                "{unit}: the clock is not guarded (SystemCallFilter=~@clock)"
            );
            for k in ["DeviceAllow", "DevicePolicy", "PrivateDevices"] {
                assert!(!svc.contains_key(k), "{unit}: {k} restricts the GPUs");
            }
        }
        // A group named here that a host lacks fails the unit: GPU groups are added to the
        // user by the package where they exist.
        assert!(
            !svc.contains_key("SupplementaryGroups"),
            "{unit}: SupplementaryGroups"
        );
        let exec: Vec<&str> = one("ExecStart").split_whitespace().collect();
        assert_eq!(exec[0], format!("/usr/bin/{binary}"), "{unit}");
        assert_eq!(
            one("ExecStartPre"),
            format!("{} --check", exec.join(" ")),
            "{unit}: the config is checked before start"
        );
        let cfg_arg = exec
            .iter()
            .position(|a| *a == "--config")
            .expect("--config");
        assert_eq!(
            exec[cfg_arg + 1],
            format!("/etc/fleetbench/{config}"),
            "{unit}"
        );
        assert!(
            dir.join(config).exists(),
            "{unit}: example {config} missing"
        );
        // The workspace builds a binary of that name.
        let crate_dir = binary.trim_start_matches("fleetbench-");
        let manifest = std::fs::read_to_string(
            fleetbench_testkit::repo_root()
                .join(crate_dir)
                .join("Cargo.toml"),
        )
        .unwrap();
        assert!(
            manifest.contains(&format!("name = \"{binary}\"")),
            "{unit}: no binary {binary}"
        );
        for env in svc.get("EnvironmentFile").into_iter().flatten() {
            let file = env.trim_start_matches('-').rsplit('/').next().unwrap();
            assert!(
                env.starts_with('-') || dir.join(file).exists(),
                "{unit}: required EnvironmentFile {env} has no example"
            );
        }
        // Writable: only the state (and cache) directories systemd makes for the unit, and HOME
        // is inside them (a HOME elsewhere is read-only under ProtectSystem=strict).
        assert!(
            !svc.contains_key("ReadWritePaths"),
            "{unit}: writes only its own directories"
        );
        let state = format!("/var/lib/{}", one("StateDirectory"));
        assert_eq!(one("WorkingDirectory"), state, "{unit}");
        let env: BTreeMap<&str, &str> = svc
            .get("Environment")
            .into_iter()
            .flatten()
            .map(|e| e.split_once('=').expect("Environment=K=V"))
            .collect();
        assert_eq!(env.get("HOME"), Some(&state.as_str()), "{unit}: HOME");
        if binary == "fleetbench-agent" {
            let cache = format!("/var/cache/{}", one("CacheDirectory"));
            // Every cache root the engines write (SGLang, vLLM, Triton, FlashInfer, Hugging
            // Face, TorchInductor, CUDA's JIT, llama.cpp's downloads) is inside the cache dir.
            for var in [
                "XDG_CACHE_HOME",
                "HF_HOME",
                "TRITON_CACHE_DIR",
                "VLLM_CACHE_ROOT",
                "FLASHINFER_WORKSPACE_BASE",
                "TORCHINDUCTOR_CACHE_DIR",
                "CUDA_CACHE_PATH",
                "LLAMA_CACHE",
            ] {
                let v = env
                    .get(var)
                    .unwrap_or_else(|| panic!("{unit}: no Environment={var}"));
                assert!(v.starts_with(&cache), "{unit}: {var}={v} outside {cache}");
            }
            for (var, v) in &env {
                assert!(
                    v.starts_with(&state) || v.starts_with(&cache),
                    "{unit}: {var}={v} is not writable"
                );
            }
        }
        assert_eq!(
            u["Install"]["WantedBy"],
            vec!["multi-user.target".to_string()]
        );
    }
    // The CA key never goes to a host: no config value names it, and no install step copies it,
    // by name or by a glob over the whole certificate directory (as the README once did).
    for f in std::fs::read_dir(&dir).unwrap() {
        let p = f.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        for line in text.lines() {
            let cmd = line.trim_start_matches(['#', ' ']);
            let copies = ["install ", "sudo install ", "cp ", "sudo cp ", "scp "]
                .iter()
                .any(|c| cmd.starts_with(c));
            let whole_dir = cmd
                .split_whitespace()
                .any(|w| w == "*" || w.ends_with("/*"));
            assert!(
                !(copies && (cmd.contains("ca.key") || whole_dir)),
                "{}: puts ca.key on a host: {line}",
                p.display()
            );
            assert!(
                !(line.contains("ca.key") && line.contains("= \"")),
                "{}: a config names ca.key: {line}",
                p.display()
            );
        }
    }
    // The example controller config parses as TOML with the controller's own fields.
    let text = std::fs::read_to_string(dir.join("controller.toml")).unwrap();
    let v: toml::Table = toml::from_str(&text).unwrap();
    for k in ["listen", "store_url", "metrics_listen"] {
        assert!(v.contains_key(k), "systemd controller.toml: {k}");
    }
}
