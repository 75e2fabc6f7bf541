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

mod helm_render;

use std::process::Command;

use helm_render::*;

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

/// The chart on a shared cluster: node pools that request what their nodes have, values the
/// chart does not know refused, no ServiceMonitor where the operator's API is missing, the Pod
/// Security level stated (and labelled on a namespace the chart makes), models from a volume or
/// fetched into the bounded cache, and the dashboards' data sources.
#[test]
fn a_shared_cluster_gets_gpu_pools_a_strict_schema_and_the_pod_security_level_it_needs() {
    let gpus = |objs: &BTreeMap<String, BTreeMap<String, Value>>, ds: &str| {
        let c = &objs["DaemonSet"][ds]["spec"]["template"]["spec"]["containers"][0];
        (
            c["resources"]["requests"]["nvidia.com/gpu"].as_u64(),
            c["resources"]["limits"]["nvidia.com/gpu"].as_u64(),
        )
    };
    // A 4-GPU pool beside the 8-GPU one: each DaemonSet lands only on nodes of its GPU count
    // and asks for that many (an 8-GPU request on a 4-GPU node waited forever).
    let pools = r#"{"agent": {"pools": [{"name": "h200x8", "gpus": 8, "nodeSelector": {"nvidia.com/gpu.count": "8"}}, {"name": "l40sx4", "gpus": 4, "nodeSelector": {"nvidia.com/gpu.count": "4", "pool": "l40s"}}]}}"#;
    let yaml = render(pools).unwrap();
    let (ok, report) = validate(&yaml);
    assert!(ok, "{report}");
    let objs = objects(&yaml);
    assert_eq!(objs["DaemonSet"].len(), 2, "{:?}", objs["DaemonSet"].keys());
    assert_eq!(gpus(&objs, "fleetbench-agent-h200x8"), (Some(8), Some(8)));
    assert_eq!(gpus(&objs, "fleetbench-agent-l40sx4"), (Some(4), Some(4)));
    let sel =
        &objs["DaemonSet"]["fleetbench-agent-l40sx4"]["spec"]["template"]["spec"]["nodeSelector"];
    assert_eq!(s(&sel["nvidia.com/gpu.count"]), "4");
    assert_eq!(
        s(&sel["nvidia.com/gpu.present"]),
        "true",
        "agent.nodeSelector kept"
    );
    assert_eq!(s(&sel["pool"]), "l40s");
    for (name, ds) in &objs["DaemonSet"] {
        let pool = s(&ds["spec"]["selector"]["matchLabels"]["fleetbench.io/pool"]);
        assert_eq!(
            format!("fleetbench-agent-{pool}"),
            *name,
            "selectors do not overlap"
        );
    }

    // Unknown or misspelt values are refused, naming the key (they were silently ignored).
    for (values, key) in [
        (r#"{"agent": {"gpuPerNode": 4}}"#, "gpuPerNode"),
        (r#"{"agent": {"gpusPerNode": 4}}"#, "gpusPerNode"),
        (r#"{"controler": {}}"#, "controler"),
        (
            r#"{"agent": {"pools": [{"name": "a", "gpus": 2, "gpu": 1}]}}"#,
            "gpu",
        ),
        (
            r#"{"metrics": {"serviceMonitor": {"enable": true}}}"#,
            "enable",
        ),
    ] {
        let err = render(values).unwrap_err();
        assert!(
            err.contains("additional properties") && err.contains(key),
            "{values}: {err}"
        );
    }
    let err = render(r#"{"agent": {"pools": [{"name": "a", "gpus": 0}]}}"#).unwrap_err();
    assert!(err.contains("/agent/pools/0/gpus"), "{err}");
    let err = render(r#"{"agent": {"pools": []}}"#).unwrap_err();
    assert!(err.contains("/agent/pools"), "{err}");
    let err =
        render(r#"{"agent": {"pools": [{"name": "a", "gpus": 1}, {"name": "a", "gpus": 2}]}}"#)
            .unwrap_err();
    assert!(err.contains("\"a\" appears twice"), "{err}");

    // Without the prometheus-operator's API the install renders (no ServiceMonitor); with it,
    // the ServiceMonitor is there.
    assert!(!objects(&render("{}").unwrap()).contains_key("ServiceMonitor"));
    assert!(objects(&render_with("{}", OPERATOR).unwrap()).contains_key("ServiceMonitor"));

    // The Pod Security level: privileged with a hostPath (the defaults mount /models and the
    // cache from the host), baseline without; labelled on the namespace when the chart makes it.
    let level = |values: &str| {
        let objs = objects(&render(values).unwrap());
        let ns = &objs["Namespace"]["fleetbench"]["metadata"]["labels"];
        for mode in ["enforce", "audit", "warn"] {
            assert_eq!(
                ns[format!("pod-security.kubernetes.io/{mode}").as_str()],
                ns["pod-security.kubernetes.io/enforce"]
            );
        }
        s(&ns["pod-security.kubernetes.io/enforce"]).to_string()
    };
    assert_eq!(level(r#"{"namespace": {"create": true}}"#), "privileged");
    let volumes_only = r#"{"namespace": {"create": true}, "agent": {"cacheHostPath": "", "models": {"hostPath": "/models", "persistentVolumeClaim": "models-ro"}}}"#;
    assert_eq!(level(volumes_only), "baseline");
    // ... and nothing in such a release needs more than baseline: no hostPath, no host
    // namespaces, no privileged container, only capabilities baseline allows.
    let objs = objects(&render(volumes_only).unwrap());
    for ds in objs["DaemonSet"].values() {
        let pod = &ds["spec"]["template"]["spec"];
        for v in pod["volumes"].as_sequence().unwrap() {
            assert!(v.get("hostPath").is_none(), "{v:?}");
        }
        let models = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| s(&v["name"]) == "models")
            .expect("a models volume");
        assert_eq!(
            s(&models["persistentVolumeClaim"]["claimName"]),
            "models-ro"
        );
        for k in ["hostPID", "hostIPC", "hostNetwork"] {
            assert!(pod.get(k).is_none(), "{k}");
        }
        for c in pod["containers"]
            .as_sequence()
            .unwrap()
            .iter()
            .chain(pod["initContainers"].as_sequence().unwrap())
        {
            let sc = &c["securityContext"];
            assert_ne!(sc["privileged"].as_bool(), Some(true));
            for cap in strings(&sc["capabilities"]["add"]) {
                assert!(["CHOWN", "FOWNER"].contains(&cap.as_str()), "{cap}");
            }
        }
    }

    // Models fetched by reference into the cache, which must be the bounded emptyDir.
    let fetch = r#"{"agent": {"cacheHostPath": "", "models": {"hostPath": "", "fetch": ["Qwen/Qwen3-8B"]}}}"#;
    let yaml = render(fetch).unwrap();
    let (ok, report) = validate(&yaml);
    assert!(ok, "{report}");
    let objs = objects(&yaml);
    let pod = &objs["DaemonSet"]["fleetbench-agent-gpu8"]["spec"]["template"]["spec"];
    let init = pod["initContainers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| s(&c["name"]) == "fetch-models")
        .expect("a fetch-models init container");
    assert_eq!(strings(&init["args"]), vec!["Qwen/Qwen3-8B"]);
    assert!(
        init["securityContext"].get("runAsUser").is_none(),
        "the engine user"
    );
    let cache = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| s(&v["name"]) == "cache")
        .unwrap();
    assert!(cache["emptyDir"].get("sizeLimit").is_some(), "{cache:?}");
    let err = render(r#"{"agent": {"models": {"fetch": ["Qwen/Qwen3-8B"]}}}"#).unwrap_err();
    assert!(
        err.contains("agent.models.fetch") && err.contains("cacheHostPath"),
        "{err}"
    );
    let err = render(
        r#"{"agent": {"engine": "llamacpp", "cacheHostPath": "", "models": {"fetch": ["a/b"]}}}"#,
    )
    .unwrap_err();
    assert!(
        err.contains("agent.models.fetch") && err.contains("llamacpp"),
        "{err}"
    );
    let err = render(r#"{"agent": {"models": {"fetch": ["not a reference"]}}}"#).unwrap_err();
    assert!(err.contains("/agent/models/fetch/0"), "{err}");

    // The dashboards' data sources, with the uids the dashboards expect; the store's password
    // comes from Grafana's environment, never from the chart.
    let ds = r#"{"grafana": {"datasources": {"tempoUrl": "http://tempo:3200", "postgres": {"host": "db:5432"}}}}"#;
    let objs = objects(&render(ds).unwrap());
    let cm = &objs["ConfigMap"]["fleetbench-datasources"];
    assert_eq!(s(&cm["metadata"]["labels"]["grafana_datasource"]), "1");
    let prov: Value =
        serde_norway::from_str(s(&cm["data"]["fleetbench-datasources.yaml"])).unwrap();
    let uids: Vec<&str> = prov["datasources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|d| s(&d["uid"]))
        .collect();
    assert_eq!(uids, ["prometheus", "tempo", "fleetbench-store"]);
    let store = &prov["datasources"][2];
    assert_eq!(s(&store["user"]), "fleetbench_grafana");
    assert_eq!(
        s(&store["secureJsonData"]["password"]),
        "${FLEETBENCH_GRAFANA_DB_PASSWORD}"
    );
    for d in ["DS_PROMETHEUS", "DS_TEMPO", "DS_POSTGRES"] {
        let text = std::fs::read_to_string(root().join("dashboards/fleet.json")).unwrap()
            + &std::fs::read_to_string(root().join("dashboards/job-timeline.json")).unwrap()
            + &std::fs::read_to_string(root().join("dashboards/config-comparison.json")).unwrap();
        assert!(text.contains(d), "the dashboards no longer use {d}");
    }
}

/// The chart's two configs, as rendered, run by the real binaries with certificates laid out as
/// cert-manager's Secrets (`tls.crt`, `tls.key`, `ca.crt`) carrying the names and usages the
/// chart's Certificates ask for: the agent registers with the controller over mTLS (no token),
/// the controller dials it back under the shared name `fleetbench-agent`, and a job runs on it
/// with the operator's certificate. Only what a cluster provides is substituted: file paths,
/// loopback addresses for the Service and the pod IP, and the Service's DNS name as the TLS name.
#[test]
fn the_charts_configs_register_an_agent_and_run_a_job_over_mtls() {
    use fleetbench_support::tls::{InitOptions, init_certs};
    use fleetbench_testkit::process::Launch;

    let objs = objects(&render("{}").unwrap());
    let agent_toml = s(&objs["ConfigMap"]["fleetbench-agent"]["data"]["agent.toml"]).to_string();
    let ctl_toml =
        s(&objs["ConfigMap"]["fleetbench-controller"]["data"]["controller.toml"]).to_string();
    let svc_host = "fleetbench-controller.fleetbench.svc";
    assert!(agent_toml.contains(&format!("https://{svc_host}:7070")));

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let certs = init_certs(
        &d.join("issued"),
        &InitOptions {
            agent_names: vec!["fleetbench-agent".into()],
            controller_names: vec![svc_host.into()],
            ..Default::default()
        },
    )
    .unwrap();
    // One directory per Secret, as the pods mount them.
    for (secret, cert, key) in [
        (
            "server",
            &certs.controller_server.cert,
            &certs.controller_server.key,
        ),
        ("client", &certs.controller_cert, &certs.controller_key),
        ("agent", &certs.agent_cert, &certs.agent_key),
    ] {
        let m = d.join("tls").join(secret);
        std::fs::create_dir_all(&m).unwrap();
        std::fs::copy(cert, m.join("tls.crt")).unwrap();
        std::fs::copy(key, m.join("tls.key")).unwrap();
        std::fs::copy(&certs.ca_cert, m.join("ca.crt")).unwrap();
    }
    let (ctl_port, metrics_port, agent_port) = (
        fleetbench_testkit::free_port(),
        fleetbench_testkit::free_port(),
        fleetbench_testkit::free_port(),
    );
    let tls_dir = format!("{}/", d.join("tls").display());
    let ctl_cfg = ctl_toml
        .replace("/etc/fleetbench/tls/", &tls_dir)
        .replace("0.0.0.0:7070", &format!("127.0.0.1:{ctl_port}"))
        .replace("0.0.0.0:9464", &format!("127.0.0.1:{metrics_port}"));
    let agent_cfg = agent_toml
        .replace("/etc/fleetbench/tls/", &tls_dir)
        .replace(
            "/var/lib/fleetbench-agent",
            &d.join("data").display().to_string(),
        )
        .replace("0.0.0.0:7443", &format!("127.0.0.1:{agent_port}"))
        .replace(
            &format!("https://{svc_host}:7070"),
            &format!("https://127.0.0.1:{ctl_port}"),
        )
        .replace(
            "key = \"/etc/fleetbench/tls/agent/tls.key\" }",
            &format!("key = \"{tls_dir}agent/tls.key\", domain = \"{svc_host}\" }}"),
        )
        .replace(
            &format!("key = \"{tls_dir}agent/tls.key\" }}"),
            &format!("key = \"{tls_dir}agent/tls.key\", domain = \"{svc_host}\" }}"),
        );
    assert!(
        agent_cfg.contains(&format!("domain = \"{svc_host}\"")),
        "{agent_cfg}"
    );
    std::fs::write(d.join("controller.toml"), &ctl_cfg).unwrap();
    std::fs::write(d.join("agent.toml"), &agent_cfg).unwrap();

    let _ctl = Launch::new("fleetbench-controller", d.join("controller.log"))
        .args(["--config".as_ref(), d.join("controller.toml").as_os_str()])
        .env(
            "FLEETBENCH_CONTROLLER__STORE_URL",
            format!("sqlite://{}", d.join("c.db").display()),
        )
        .spawn();
    // The DaemonSet's environment: the node's name, the pod IP as the address to dial back.
    let _agent = Launch::new("fleetbench-agent", d.join("agent.log"))
        .args(["--config".as_ref(), d.join("agent.toml").as_os_str()])
        .env("FLEETBENCH_AGENT__NAME", "gpu-node-1")
        .env(
            "FLEETBENCH_AGENT__CONTROLLER__ADVERTISE",
            format!("127.0.0.1:{agent_port}"),
        )
        .spawn();

    let cli = |args: &[&str]| {
        Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
            .args(args)
            .args(["--controller", &format!("https://127.0.0.1:{ctl_port}")])
            .arg("--tls-ca")
            .arg(&certs.ca_cert)
            .arg("--tls-cert")
            .arg(&certs.operator.cert)
            .arg("--tls-key")
            .arg(&certs.operator.key)
            .current_dir(d)
            .output()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = cli(&["agents"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() && text.contains("gpu-node-1") && text.contains("ready") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not register and become ready: {text}{}\ncontroller: {}\nagent: {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(d.join("controller.log")).unwrap_or_default(),
            std::fs::read_to_string(d.join("agent.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    std::fs::write(
        d.join("job.toml"),
        "name = \"chart-wiring\"\n[[configs]]\nname = \"sim\"\nengine = \"sim\"\nmodel = \"sim-model\"\n\
         flags = { \"--ttft-ms\" = 5, \"--itl-ms\" = 2 }\n[[workloads]]\nname = \"w\"\ndataset = \"random\"\n\
         input_len = 16\noutput_len = 8\n[load]\nconcurrency = [1, 2]\nrequests = 8\n",
    )
    .unwrap();
    let out = cli(&["run", "job.toml"]);
    assert!(
        out.status.success(),
        "fleetbench run over the chart's mTLS: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
