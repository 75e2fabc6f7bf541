use super::*;

fn base() -> PathBuf {
    std::env::temp_dir()
}

#[test]
fn gpu_source_is_nvml_or_a_dcgm_exporter_url() {
    let with = |gpu: &str| {
        AgentConfig::from_toml(
            &format!(
                "listen = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = \"/tmp/x\"\n[gpu]\n{gpu}"
            ),
            &base(),
        )
    };
    assert_eq!(with("").unwrap().gpu_source, GpuTelemetrySource::Nvml);
    assert_eq!(
        with("source = \"dcgm-exporter\"\ndcgm_exporter_url = \"http://127.0.0.1:9400/metrics\"\n")
            .unwrap()
            .gpu_source,
        GpuTelemetrySource::DcgmExporter {
            url: "http://127.0.0.1:9400/metrics".into()
        }
    );
    for (gpu, field) in [
        ("source = \"dcgm\"\n", "`gpu.source`"),
        ("source = \"dcgm-exporter\"\n", "`gpu.dcgm_exporter_url`"),
        (
            "source = \"dcgm-exporter\"\ndcgm_exporter_url = \"https://x:9400/metrics\"\n",
            "`gpu.dcgm_exporter_url`",
        ),
        (
            "dcgm_exporter_url = \"http://x:9400/metrics\"\n",
            "`gpu.dcgm_exporter_url`",
        ),
        ("sourse = \"nvml\"\n", "sourse"),
    ] {
        let err = with(gpu).unwrap_err().to_string();
        assert!(err.contains(field), "{gpu}: {err}");
    }
}

#[test]
fn insecure_only_on_loopback() {
    let err = AgentConfig::from_toml(
        "listen = \"0.0.0.0:7443\"\ninsecure = true\ndata_dir = \"/tmp/x\"\n",
        &base(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("`insecure`"), "{err}");
    assert!(err.to_string().contains("loopback"), "{err}");
    let ok = AgentConfig::from_toml(
        "listen = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = \"/tmp/x\"\n",
        &base(),
    )
    .unwrap();
    assert!(ok.tls.is_none());
    assert!(ok.profiles.contains_key("sim"));
}

#[test]
fn tls_required_and_files_checked() {
    let err = AgentConfig::from_toml("listen = \"0.0.0.0:1\"\ndata_dir = \"/tmp/x\"\n", &base())
        .unwrap_err();
    assert!(err.to_string().contains("`tls`"), "{err}");
    let err = AgentConfig::from_toml(
        "data_dir = \"/tmp/x\"\n[tls]\ncert = \"/nonexistent/a.pem\"\nkey = \"/x\"\nclient_ca = \"/y\"\n",
        &base(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("tls.cert"), "{err}");
}

#[test]
fn bad_values_name_their_field() {
    let err = AgentConfig::from_toml(
        "listen = \"nonsense\"\ninsecure = true\ndata_dir = \"/tmp/x\"\n",
        &base(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("`listen`"), "{err}");
    let err = AgentConfig::from_toml(
        "listen = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = \"/tmp/x\"\nlisten_typo = 1\n",
        &base(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("listen_typo"), "{err}");
    let err = AgentConfig::from_toml(
        "listen = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = \"/tmp/x\"\n[profiles.x]\nkind = \"sglangg\"\n",
        &base(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("sglangg"), "{err}");
}

#[test]
fn env_overrides_nested_fields() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = \"data\"\n[profiles.mysim]\nkind = \"sim\"\nprogram = \"/bin/true\"\nport = 31000\n",
    )
    .unwrap();
    let env = BTreeMap::from([
        (
            "FLEETBENCH_AGENT__PROFILES__MYSIM__PORT".to_string(),
            "31001".to_string(),
        ),
        (
            "FLEETBENCH_AGENT__LABELS__RACK".to_string(),
            "r7".to_string(),
        ),
    ]);
    let cfg = AgentConfig::load_with_env(&path, env).unwrap();
    assert_eq!(cfg.profiles["mysim"].port, 31001);
    assert_eq!(cfg.labels["rack"], "r7");
    assert_eq!(cfg.data_dir, dir.path().join("data"));
}
