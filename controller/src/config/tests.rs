use super::*;

#[test]
fn defaults_are_loopback_sqlite() {
    let c = ControllerConfig::from_toml("").unwrap();
    assert!(c.listen.ip().is_loopback());
    assert!(c.store_url.starts_with("sqlite://"));
    assert_eq!(c.heartbeat_interval, Duration::from_secs(2));
    assert!(c.hosts.is_empty());
}

#[test]
fn every_problem_is_reported_with_its_field() {
    let err = ControllerConfig::from_toml(
        r#"
        listen = "0.0.0.0:7070"
        store_url = "mysql://x"
        heartbeat_interval = "soon"
        [[hosts]]
        name = "a"
        address = "10.0.0.1"
        [[hosts]]
        name = "a"
        address = "10.0.0.2:7000"
        "#,
    )
    .unwrap_err();
    let text = err.to_string();
    for needle in [
        "listen: 0.0.0.0:7070 is not a loopback address",
        "store_url: \"mysql://x\"",
        "heartbeat_interval: \"soon\"",
        "hosts[0].address: \"10.0.0.1\" is not host:port",
        "hosts[1].name: \"a\" is listed twice",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn a_token_needs_tls_off_loopback_and_unknown_keys_are_refused() {
    let err = ControllerConfig::from_toml("listen = \"0.0.0.0:7070\"\n[api]\ntoken = \"s3cret\"\n")
        .unwrap_err();
    assert!(
        err.to_string().contains("never accepted over plaintext"),
        "{err}"
    );
    let c = ControllerConfig::from_toml("listen = \"127.0.0.1:7070\"\n[api]\ntoken = \"s3cret\"\n")
        .unwrap();
    assert_eq!(c.api_token.as_deref(), Some("s3cret"));
    let err = ControllerConfig::from_toml("lisen = \"127.0.0.1:1\"").unwrap_err();
    assert!(err.to_string().contains("lisen"), "{err}");
}

#[test]
fn metrics_beyond_loopback_need_auth_over_tls_or_the_named_opt_in() {
    let load = |extra: &str| {
        ControllerConfig::from_toml(&format!("metrics_listen = \"0.0.0.0:9464\"\n{extra}"))
    };
    let e = load("").unwrap_err().to_string();
    for w in [
        "metrics_listen: 0.0.0.0:9464 is not a loopback address",
        "metrics.unauthenticated_off_loopback = true",
        "auth = \"viewer\"",
    ] {
        assert!(e.contains(w), "{w:?} not in {e}");
    }
    // A viewer token alone would cross the network in plaintext.
    let e = load(
        "[[api.tokens]]\nrole = \"viewer\"\ntoken = \"viewer-token-0123456789\"\n\
         [metrics]\nauth = \"viewer\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("metrics.tls is not set"), "{e}");
    // The named opt-in, and loopback, need nothing.
    let c = load("[metrics]\nunauthenticated_off_loopback = true\n").unwrap();
    assert_eq!(c.metrics.auth, MetricsAuth::None);
    ControllerConfig::from_toml("metrics_listen = \"127.0.0.1:9464\"").unwrap();
    // auth = viewer with no way to prove it; a typo in the section.
    let e = ControllerConfig::from_toml("[metrics]\nauth = \"viewer\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("metrics.auth: \"viewer\" needs"), "{e}");
    let e = ControllerConfig::from_toml("[metrics]\nauht = \"viewer\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("auht"), "{e}");
}

#[test]
fn missing_tls_files_are_named() {
    let err = ControllerConfig::from_toml(
        "[agent_tls]\nca = \"/nonexistent/ca.pem\"\ncert = \"/x/c.pem\"\nkey = \"/x/k\"\n",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("agent_tls: cannot read /nonexistent/ca.pem"),
        "{err}"
    );
}
