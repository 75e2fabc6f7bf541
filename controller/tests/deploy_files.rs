//! The deployment files parse and hang together: compose (YAML, mounted files exist, the
//! collector's pipelines use only receivers/processors/exporters it defines, Prometheus scrapes
//! the port the controller serves), systemd units (INI: sections, hardening, config files that
//! exist), Kubernetes (every document, references between ConfigMaps, Secrets, Services).

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
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                assert!(!yaml_docs(&p).is_empty(), "{}: empty", p.display());
                count += 1;
            }
        }
    }
    assert!(count >= 10, "only {count} YAML files");
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
    let controller = fleetbench_controller::ControllerConfig::load(Some(
        &dir.join("controller/controller.toml"),
    ))
    .expect("compose controller.toml is a valid controller config");
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
    for (unit, binary, config) in [
        ("fleetbench-agent.service", "fleetbench-agent", "agent.toml"),
        (
            "fleetbench-controller.service",
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
        assert_eq!(one("User"), "fleetbench", "{unit}: own user");
        assert_eq!(one("NoNewPrivileges"), "yes", "{unit}");
        assert_eq!(one("Restart"), "on-failure", "{unit}");
        assert_eq!(one("ProtectSystem"), "strict", "{unit}");
        assert_eq!(one("CapabilityBoundingSet"), "", "{unit}: no capabilities");
        let exec: Vec<&str> = one("ExecStart").split_whitespace().collect();
        assert_eq!(exec[0], format!("/usr/local/bin/{binary}"), "{unit}");
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
        for rw in svc.get("ReadWritePaths").into_iter().flatten() {
            let state = format!("/var/lib/{}", one("StateDirectory"));
            assert!(
                rw.split_whitespace().all(|p| p == state),
                "{unit}: writes only its state dir"
            );
        }
        assert_eq!(
            u["Install"]["WantedBy"],
            vec!["multi-user.target".to_string()]
        );
    }
    // The example controller config parses as TOML with the controller's own fields.
    let text = std::fs::read_to_string(dir.join("controller.toml")).unwrap();
    let v: toml::Table = toml::from_str(&text).unwrap();
    for k in ["listen", "store_url", "metrics_listen", "otlp_endpoint"] {
        assert!(v.contains_key(k), "systemd controller.toml: {k}");
    }
}

#[test]
fn kubernetes_manifests_reference_what_exists() {
    let dir = deploy().join("kubernetes");
    let kust = yaml(&dir.join("kustomization.yaml"));
    let mut docs = Vec::new();
    for r in kust["resources"].as_sequence().unwrap() {
        let file = dir.join(s(r, "resource"));
        assert!(
            file.exists(),
            "kustomization names missing {}",
            file.display()
        );
        docs.extend(yaml_docs(&file));
    }
    let mut by_kind: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
    for d in docs {
        let kind = s(&d["kind"], "kind").to_string();
        assert!(d["apiVersion"].as_str().is_some(), "{kind}: apiVersion");
        let name = s(&d["metadata"]["name"], "metadata.name").to_string();
        by_kind.entry(kind).or_default().insert(name, d);
    }
    let ds = &by_kind["DaemonSet"]["fleetbench-agent"];
    let deployment = &by_kind["Deployment"]["fleetbench-controller"];
    let service = &by_kind["Service"]["fleetbench-controller"];
    assert!(
        ds["spec"]["template"]["spec"]["nodeSelector"]
            .as_mapping()
            .is_some_and(|m| m.keys().any(|k| s(k, "selector").contains("gpu"))),
        "the agent DaemonSet selects GPU nodes"
    );
    // Service selects the controller's pods and exposes its container ports.
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_mapping().unwrap() {
        assert_eq!(&pod_labels[k], v, "Service selector {k:?}");
    }
    assert_eq!(deployment["spec"]["selector"]["matchLabels"], *pod_labels);
    let ports: BTreeSet<String> = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| s(&p["name"], "port name").to_string())
        .collect();
    for p in service["spec"]["ports"].as_sequence().unwrap() {
        assert!(ports.contains(s(&p["targetPort"], "targetPort")), "{p:?}");
    }
    // Every mounted ConfigMap/Secret exists, with the keys mounted by subPath.
    for workload in [ds, deployment] {
        let spec = &workload["spec"]["template"]["spec"];
        let volumes: BTreeMap<String, &Value> = spec["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| (s(&v["name"], "volume").to_string(), v))
            .collect();
        for c in spec["containers"].as_sequence().unwrap() {
            for m in c["volumeMounts"].as_sequence().unwrap() {
                let v = volumes
                    .get(s(&m["name"], "mount"))
                    .unwrap_or_else(|| panic!("mount {:?} has no volume", m["name"]));
                if let Some(cm) = v["configMap"]["name"].as_str() {
                    let map = by_kind["ConfigMap"]
                        .get(cm)
                        .unwrap_or_else(|| panic!("ConfigMap {cm}"));
                    if let Some(key) = m["subPath"].as_str() {
                        let body = s(&map["data"][key], "config data");
                        let parsed: toml::Table =
                            toml::from_str(body).unwrap_or_else(|e| panic!("{cm}/{key}: {e}"));
                        assert!(parsed.contains_key("listen"), "{cm}/{key}");
                    }
                }
                if let Some(secret) = v["secret"]["secretName"].as_str() {
                    assert!(
                        by_kind["Secret"].contains_key(secret),
                        "Secret {secret} not defined"
                    );
                }
            }
        }
    }
    // Certificate material is in Secrets, and the configs point at the mounted files.
    let agent_tls = &by_kind["Secret"]["fleetbench-agent-tls"]["stringData"];
    let agent_toml = s(
        &by_kind["ConfigMap"]["fleetbench-agent"]["data"]["agent.toml"],
        "agent.toml",
    );
    for key in ["ca.pem", "agent.pem", "agent.key"] {
        assert!(agent_tls.get(key).is_some(), "agent Secret lacks {key}");
        assert!(
            agent_toml.contains(&format!("/etc/fleetbench/tls/{key}")),
            "agent.toml uses {key}"
        );
    }
}
