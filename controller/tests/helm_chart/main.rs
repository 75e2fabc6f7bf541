//! The Helm chart (`deploy/helm/fleetbench`) rendered offline by Helm's own engine and linted
//! strictly (`scripts/deploy-check/render.py`, helm-python-sdk from PyPI), every rendered object
//! validated against the Kubernetes API schemas (`scripts/deploy-check/validate.mjs`,
//! `kubernetes-models` from npm, with cert-manager's and prometheus-operator's CRDs), then read
//! and, for the built-in kinds, strictly (unknown fields refused) against Kubernetes 1.27 (the
//! chart's floor) and 1.33 with `kubernetes-validate` (PyPI); then read as a platform engineer
//! would: the agent DaemonSet requests the GPUs, runs non-root with
//! writable data and cache directories; the certificates carry the usages each identity needs;
//! the controller's store URL comes from a Secret; no Secret is shipped.
//!
//! `scripts/test.sh` installs both tools (into `.deploy-tools/` and
//! `scripts/deploy-check/node_modules/`).

mod cluster;
mod mtls;
mod render;

use std::process::Command;

use render::*;

const VARIANTS: [&str; 3] = [
    "{}",
    r#"{"agent": {"engine": "vllm", "dataHostPath": "/var/lib/fleetbench-agent", "cacheHostPath": "", "labels": {"pool": "h200"}, "runtimeClassName": "nvidia", "extraProfiles": "[profiles.vllm-tp8]\nkind = \"vllm\"\nprogram = \"vllm\"\n"}, "certManager": {"createIssuer": false, "issuerRef": {"kind": "ClusterIssuer", "name": "fleet-ca"}}, "controller": {"otlpEndpoint": "http://otel:4317"}}"#,
    r#"{"agent": {"engine": "llamacpp", "models": {"hostPath": ""}}, "certManager": {"enabled": false}, "metrics": {"serviceMonitor": {"enabled": false}}, "grafana": {"dashboards": {"enabled": false}}}"#,
];

#[test]
fn every_rendered_object_is_valid_against_the_kubernetes_schemas() {
    for (values, apis) in VARIANTS
        .iter()
        .flat_map(|v| [(*v, &[][..]), (*v, OPERATOR)])
    {
        let yaml = render_with(values, apis).unwrap_or_else(|e| panic!("values {values}: {e}"));
        let count = objects(&yaml).values().map(BTreeMap::len).sum::<usize>();
        let (ok, report) = validate(&yaml);
        assert!(ok, "values {values}:\n{report}");
        assert!(
            report.contains(&format!("{count} valid, 0 invalid")),
            "values {values}: every one of {count} objects checked:\n{report}"
        );
        for version in ["1.27.0", "1.33.0"] {
            let (ok, report) = validate_strict(&yaml, version);
            assert!(ok, "values {values}, Kubernetes {version}:\n{report}");
        }
        // No placeholder Secret is ever shipped: Secrets come from cert-manager or the operator.
        assert!(!objects(&yaml).contains_key("Secret"), "values {values}");
    }
}

#[test]
fn the_checks_fail_on_a_broken_object_and_bad_values() {
    let yaml = render("{}").unwrap();
    // A port given by name where the API wants a number, and a usage cert-manager does not know.
    let broken = yaml
        .replacen("containerPort: 7443", "containerPort: \"7443/tcp\"", 1)
        .replacen("[server auth,", "[serverauth,", 1);
    assert_ne!(yaml, broken);
    let (ok, report) = validate(&broken);
    assert!(!ok, "{report}");
    assert!(
        report.contains("INVALID apps/v1 DaemonSet fleetbench-agent"),
        "{report}"
    );
    assert!(
        report.contains("INVALID cert-manager.io/v1 Certificate"),
        "{report}"
    );
    // A field the API does not have (hostPID misspelt: silently dropped by a lenient check).
    let typo = yaml.replacen(
        "automountServiceAccountToken: false",
        "automountServiceAccountToken: false\n      hostPid: true",
        1,
    );
    let (ok, report) = validate_strict(&typo, "1.33.0");
    assert!(
        !ok && report.contains("'hostPid' was unexpected"),
        "{report}"
    );
    // Helm refuses values the chart cannot serve, naming them.
    let err = render(r#"{"agent": {"engine": "tgi"}}"#).unwrap_err();
    assert!(err.contains("agent.engine") && err.contains("tgi"), "{err}");
    let err = render(r#"{"certManager": {"createIssuer": false}}"#).unwrap_err();
    assert!(err.contains("certManager.issuerRef"), "{err}");
    // values.schema.json: the engine never runs as root, one scheduler per store.
    let err = render(r#"{"agent": {"runAsUser": 0}}"#).unwrap_err();
    assert!(err.contains("/agent/runAsUser"), "{err}");
    let err = render(r#"{"controller": {"replicas": 2}}"#).unwrap_err();
    assert!(err.contains("/controller/replicas"), "{err}");
}

#[test]
fn the_agent_daemonset_requests_gpus_runs_non_root_with_writable_dirs() {
    for values in VARIANTS {
        let objs = objects(&render(values).unwrap());
        let ds = &objs["DaemonSet"]["fleetbench-agent-gpu8"];
        let pod = &ds["spec"]["template"]["spec"];
        let agent = &pod["containers"][0];
        // GPUs through the device plugin: counted by the scheduler, exposed by the runtime.
        for side in ["requests", "limits"] {
            assert_eq!(
                agent["resources"][side]["nvidia.com/gpu"].as_u64(),
                Some(8),
                "{values}: {side}"
            );
        }
        let env: BTreeMap<String, Value> = agent["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|e| (s(&e["name"]).to_string(), e["value"].clone()))
            .collect();
        assert!(
            !env.contains_key("NVIDIA_VISIBLE_DEVICES"),
            "{values}: GPUs bypass the device plugin"
        );
        // No host PID namespace: the GPU-memory check works without it.
        assert!(pod.get("hostPID").is_none(), "{values}");
        // Non-root, numerically, without privilege escalation.
        let psc = &pod["securityContext"];
        assert_eq!(psc["runAsNonRoot"].as_bool(), Some(true));
        let uid = psc["runAsUser"].as_u64().unwrap();
        let gid = psc["runAsGroup"].as_u64().unwrap();
        assert_ne!(uid, 0);
        assert_eq!(
            agent["securityContext"]["allowPrivilegeEscalation"].as_bool(),
            Some(false)
        );
        assert!(
            agent["securityContext"].get("runAsUser").is_none(),
            "the pod's uid"
        );
        // Writable data and cache dirs, HOME and every engine cache inside them.
        let mounts: BTreeMap<String, &Value> = agent["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| (s(&m["mountPath"]).to_string(), m))
            .collect();
        let volumes: BTreeMap<String, &Value> = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| (s(&v["name"]).to_string(), v))
            .collect();
        let init = &pod["initContainers"][0];
        let init_script = strings(&init["args"]).join(" ");
        for dir in ["/var/lib/fleetbench-agent", "/var/cache/fleetbench-agent"] {
            let m = mounts
                .get(dir)
                .unwrap_or_else(|| panic!("{values}: {dir} not mounted"));
            assert_ne!(m["readOnly"].as_bool(), Some(true), "{values}: {dir}");
            let vol = volumes[s(&m["name"])];
            assert!(
                vol.get("emptyDir").is_some() || vol.get("hostPath").is_some(),
                "{values}: {dir}: {vol:?}"
            );
            // A hostPath arrives root-owned: the init container, which mounts the same volume
            // at the same path, hands it to the engine's uid (fsGroup covers emptyDir only).
            let init_mounts: Vec<(String, String)> = init["volumeMounts"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|m| (s(&m["name"]).to_string(), s(&m["mountPath"]).to_string()))
                .collect();
            assert!(
                init_mounts.contains(&(s(&m["name"]).to_string(), dir.to_string())),
                "{values}: init container prepares {dir}"
            );
            assert!(
                init_script.contains(&format!("chown {uid}:{gid}")) && init_script.contains(dir),
                "{values}: {init_script}"
            );
        }
        assert_eq!(
            init["securityContext"]["capabilities"]["add"],
            serde_norway::from_str::<Value>("[CHOWN, FOWNER]").unwrap(),
            "{values}: the init container gets only what chown needs"
        );
        assert_eq!(s(&env["HOME"]), "/var/lib/fleetbench-agent");
        for var in [
            "XDG_CACHE_HOME",
            "HF_HOME",
            "TRITON_CACHE_DIR",
            "VLLM_CACHE_ROOT",
            "FLASHINFER_WORKSPACE_BASE",
            "TORCHINDUCTOR_CACHE_DIR",
            "CUDA_CACHE_PATH",
        ] {
            assert!(
                s(&env[var]).starts_with("/var/cache/fleetbench-agent"),
                "{values}: {var}"
            );
        }
        assert!(mounts.contains_key("/tmp") && mounts.contains_key("/dev/shm"));
        // The agent's config: its data_dir is the data volume, its TLS files are in the Secret's
        // mount, and the profile of the image's engine is there.
        let cm = &objs["ConfigMap"]["fleetbench-agent"];
        let cfg: toml::Table = toml::from_str(s(&cm["data"]["agent.toml"]))
            .unwrap_or_else(|e| panic!("{values}: agent.toml: {e}"));
        assert_eq!(cfg["data_dir"].as_str(), Some("/var/lib/fleetbench-agent"));
        let tls_mount = mounts
            .iter()
            .find(|(_, m)| volumes[s(&m["name"])].get("secret").is_some())
            .map(|(p, _)| p.clone())
            .unwrap();
        for k in ["cert", "key", "client_ca"] {
            assert!(
                cfg["tls"][k].as_str().unwrap().starts_with(&tls_mount),
                "{k}"
            );
        }
        let image = s(&agent["image"]);
        let engine = image.rsplit('-').next().unwrap();
        assert!(
            cfg["profiles"]
                .as_table()
                .unwrap()
                .values()
                .any(|p| p["kind"].as_str() == Some(engine)),
            "{values}: a profile for {engine} ({image})"
        );
    }
}

#[test]
fn certificates_controller_store_and_monitoring_hang_together() {
    let objs = objects(&render_with("{}", OPERATOR).unwrap());
    let certs = &objs["Certificate"];
    let by_secret: BTreeMap<String, &Value> = certs
        .values()
        .map(|c| (s(&c["spec"]["secretName"]).to_string(), c))
        .collect();
    let usages = |secret: &str| -> Vec<String> {
        strings(
            &by_secret
                .get(secret)
                .unwrap_or_else(|| panic!("no Certificate for {secret}"))["spec"]["usages"],
        )
    };
    let dep = &objs["Deployment"]["fleetbench-controller"];
    let pod = &dep["spec"]["template"]["spec"];
    let ctl = &pod["containers"][0];
    let secret_of = |mount_prefix: &str| -> String {
        let m = ctl["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| mount_prefix.starts_with(s(&m["mountPath"])))
            .unwrap_or_else(|| panic!("nothing mounted at {mount_prefix}"));
        let v = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap();
        s(&v["secret"]["secretName"]).to_string()
    };
    let cfg: toml::Table = toml::from_str(s(
        &objs["ConfigMap"]["fleetbench-controller"]["data"]["controller.toml"],
    ))
    .unwrap();
    // The API is served with a serverAuth certificate for the Service's names, which is where
    // the agents dial it.
    let api_secret = secret_of(cfg["api"]["tls"]["cert"].as_str().unwrap());
    let u = usages(&api_secret);
    assert!(
        u.contains(&"server auth".into()) && !u.contains(&"client auth".into()),
        "{u:?}"
    );
    let agent_cfg: toml::Table = toml::from_str(s(
        &objs["ConfigMap"]["fleetbench-agent"]["data"]["agent.toml"]
    ))
    .unwrap();
    let addr = agent_cfg["controller"]["address"].as_str().unwrap();
    let host = addr
        .trim_start_matches("https://")
        .split(':')
        .next()
        .unwrap();
    assert!(
        strings(&by_secret[&api_secret]["spec"]["dnsNames"]).contains(&host.to_string()),
        "{host}"
    );
    // Operators reach it through `kubectl port-forward` as localhost (docs/deploy.md).
    assert!(strings(&by_secret[&api_secret]["spec"]["dnsNames"]).contains(&"localhost".into()));
    // The controller dials agents as a client, and agents serve the name it checks.
    let client_secret = secret_of(cfg["agent_tls"]["cert"].as_str().unwrap());
    assert_eq!(
        usages(&client_secret),
        vec!["client auth", "digital signature"]
    );
    let agent_secret = "fleetbench-agent-tls";
    let u = usages(agent_secret);
    assert!(u.contains(&"server auth".into()) && u.contains(&"client auth".into()));
    assert!(
        strings(&by_secret[agent_secret]["spec"]["dnsNames"])
            .contains(&cfg["agent_tls"]["domain"].as_str().unwrap().to_string())
    );
    assert_eq!(
        usages("fleetbench-operator-tls"),
        vec!["client auth", "digital signature"]
    );
    // Agents register (their [controller] section) and RegisterAgent carries no bearer token: an
    // API token on the controller would refuse every agent, so the API is mTLS only.
    assert!(agent_cfg.contains_key("controller"));
    let api = cfg["api"].as_table().unwrap();
    assert!(
        !api.contains_key("token") && !api.contains_key("token_file"),
        "a token locks the registering agents out: {api:?}"
    );
    // The store URL comes from a Secret, never from the ConfigMap.
    assert!(!cfg.contains_key("store_url"));
    let store = ctl["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "FLEETBENCH_CONTROLLER__STORE_URL")
        .expect("store URL env");
    assert_eq!(
        s(&store["valueFrom"]["secretKeyRef"]["name"]),
        "fleetbench-postgres"
    );
    // Probes and a Service for the controller's pods; no disruption budget: with one replica
    // it would block every drain of the node (its jobs resume wherever it restarts).
    for p in ["readinessProbe", "livenessProbe", "startupProbe"] {
        assert!(ctl.get(p).is_some(), "controller {p}");
    }
    let labels = &dep["spec"]["template"]["metadata"]["labels"];
    let selects = |sel: &Value| {
        sel.as_mapping()
            .unwrap()
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    };
    assert!(
        !objs.contains_key("PodDisruptionBudget"),
        "{:?}",
        objs.keys()
    );
    let svc = &objs["Service"]["fleetbench-controller"];
    assert!(selects(&svc["spec"]["selector"]));
    let port_names: Vec<String> = ctl["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| s(&p["name"]).to_string())
        .collect();
    for p in svc["spec"]["ports"].as_sequence().unwrap() {
        assert!(port_names.contains(&s(&p["targetPort"]).to_string()));
    }
    // The ServiceMonitor scrapes the Service's metrics port.
    let sm = &objs["ServiceMonitor"]["fleetbench-controller"];
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(
            svc["metadata"]["labels"].get(k),
            Some(v),
            "ServiceMonitor selector {k:?}"
        );
    }
    let sm_port = s(&sm["spec"]["endpoints"][0]["port"]);
    assert!(
        svc["spec"]["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|p| s(&p["name"]) == sm_port)
    );
    // /metrics is on the pod network: viewers only over HTTPS with the API's certificate, and
    // the ServiceMonitor presents a viewer's client certificate and checks the server's name.
    assert_eq!(cfg["metrics"]["auth"].as_str(), Some("viewer"));
    assert_eq!(
        secret_of(cfg["metrics"]["tls"]["cert"].as_str().unwrap()),
        api_secret
    );
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(s(&ep["scheme"]), "https");
    let viewer = s(&ep["tlsConfig"]["cert"]["secret"]["name"]);
    assert_eq!(s(&ep["tlsConfig"]["keySecret"]["name"]), viewer);
    assert_eq!(s(&ep["tlsConfig"]["ca"]["secret"]["name"]), viewer);
    assert_eq!(usages(viewer), vec!["client auth", "digital signature"]);
    assert_eq!(
        strings(&by_secret[viewer]["spec"]["subject"]["organizationalUnits"]),
        vec!["viewer"]
    );
    assert!(
        strings(&by_secret[&api_secret]["spec"]["dnsNames"])
            .contains(&s(&ep["tlsConfig"]["serverName"]).to_string())
    );
    for p in ["startupProbe", "livenessProbe"] {
        assert_eq!(
            s(&ctl[p]["httpGet"]["path"]),
            "/healthz",
            "{p}: /metrics needs a viewer"
        );
        assert_eq!(s(&ctl[p]["httpGet"]["scheme"]), "HTTPS", "{p}");
    }
    // Every dashboard as a ConfigMap for Grafana's sidecar, byte for byte.
    let mut n = 0;
    for e in std::fs::read_dir(root().join("dashboards")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let stem = p.file_stem().unwrap().to_str().unwrap();
        let cm = &objs["ConfigMap"][&format!("fleetbench-dashboard-{stem}")];
        assert_eq!(s(&cm["metadata"]["labels"]["grafana_dashboard"]), "1");
        let file = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            s(&cm["data"][file]).trim_end(),
            std::fs::read_to_string(&p).unwrap().trim_end(),
            "{file}"
        );
        n += 1;
    }
    assert!(n >= 4, "{n} dashboards");
}
