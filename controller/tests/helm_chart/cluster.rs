//! A shared cluster: GPU pools, a strict schema and the pod security level the agent needs.

use super::*;

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
