//! The chart rendered by Helm's own engine and checked against the Kubernetes schemas, for
//! `helm_chart.rs`: the tools `scripts/test.sh` installs into `.deploy-tools/` and
//! `scripts/deploy-check/node_modules/`, run as child processes.
#![allow(dead_code)]

pub use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::Deserialize;
pub use serde_norway::Value;

pub fn root() -> PathBuf {
    fleetbench_testkit::repo_root()
}

pub fn python() -> PathBuf {
    let tools = std::env::var_os("FLEETBENCH_DEPLOY_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".deploy-tools"));
    let py = tools.join("venv/bin/python");
    assert!(
        py.exists(),
        "{} missing: scripts/test.sh installs it (python3 -m venv .deploy-tools/venv && \
         .deploy-tools/venv/bin/pip install helm-python-sdk==0.2.2 kubernetes-validate==1.37.0)",
        py.display()
    );
    py
}

/// The API a cluster with the prometheus-operator serves (`helm template --api-versions`).
pub const OPERATOR: &[&str] = &["monitoring.coreos.com/v1/ServiceMonitor"];

/// The chart rendered with `values` (JSON merged over values.yaml): YAML text.
pub fn render(values: &str) -> Result<String, String> {
    render_with(values, &[])
}

/// The chart rendered for a cluster that also serves `api_versions`.
pub fn render_with(values: &str, api_versions: &[&str]) -> Result<String, String> {
    let out = Command::new(python())
        .arg(root().join("scripts/deploy-check/render.py"))
        .arg(root().join("deploy/helm/fleetbench"))
        .args(["--set-json", values])
        .args(["--api-versions", &api_versions.join(",")])
        .output()
        .expect("run render.py");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The validator's verdict on a YAML stream: (success, its output).
pub fn validate(yaml: &str) -> (bool, String) {
    let dir = root().join("scripts/deploy-check");
    assert!(
        dir.join("node_modules/kubernetes-models").exists(),
        "scripts/deploy-check/node_modules missing: scripts/test.sh runs `npm ci` there"
    );
    let mut child = Command::new("node")
        .arg("validate.mjs")
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `kubernetes-validate --strict` on a YAML stream for Kubernetes `version`: (success, output).
/// It knows the built-in kinds only (cert-manager and prometheus-operator: `validate`).
pub fn validate_strict(yaml: &str, version: &str) -> (bool, String) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    let bin = python().with_file_name("kubernetes-validate");
    let out = Command::new(&bin)
        .args(["--strict", "--quiet", "--no-warn", "-k", version])
        .arg(file.path())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// kind -> name -> object.
pub fn objects(yaml: &str) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut out: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
    for d in serde_norway::Deserializer::from_str(yaml) {
        let v = Value::deserialize(d).unwrap();
        if v.is_null() {
            continue;
        }
        let kind = v["kind"].as_str().unwrap().to_string();
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        assert!(
            out.entry(kind.clone())
                .or_default()
                .insert(name.clone(), v)
                .is_none(),
            "{kind} {name} rendered twice"
        );
    }
    out
}

pub fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|q| q.iter().map(|x| s(x).to_string()).collect())
        .unwrap_or_default()
}
