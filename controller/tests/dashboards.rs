//! Static checks of the Grafana dashboards and their provisioning: valid JSON, unique ids, the
//! 24-column grid, datasources only through provisioned uids or variables, titles and units,
//! every PromQL expression parses and names metrics and labels the controller exports, every
//! TraceQL attribute is one the docs list.

mod dashboards_common;

use std::collections::{BTreeSet, HashMap, HashSet};

use dashboards_common::*;
use fleetbench_controller::metrics::names::{self, Kind};
use serde_json::Value;

fn provisioned_uids() -> HashMap<String, String> {
    let path = dashboards_dir().join("provisioning/datasources/fleetbench.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let v: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    v["datasources"]
        .as_sequence()
        .expect("datasources list")
        .iter()
        .map(|d| {
            (
                d["uid"]
                    .as_str()
                    .expect("every datasource has a fixed uid")
                    .to_string(),
                d["type"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Prometheus names the controller exports (histograms with their series suffixes).
fn exported_metric_names() -> HashSet<String> {
    let mut out = HashSet::new();
    for m in names::all() {
        let p = m.prometheus_name();
        if m.kind == Kind::Histogram {
            for s in ["_bucket", "_sum", "_count"] {
                out.insert(format!("{p}{s}"));
            }
        } else {
            out.insert(p);
        }
    }
    out
}

/// Label names the controller's metrics carry.
fn exported_labels() -> HashSet<String> {
    use fleetbench_controller::metrics::names::{attr, prometheus_label};
    let keys = [
        attr::JOB_ID,
        attr::JOB_KIND,
        attr::JOB_STATE,
        attr::TRIAL_STATE,
        attr::HOST,
        attr::CONFIG_ID,
        attr::CONFIG_NAME,
        attr::ENGINE_KIND,
        attr::WORKLOAD,
        attr::REPEAT,
        attr::CONCURRENCY,
        attr::REQUEST_RATE,
        attr::QUANTILE,
        attr::OUTCOME,
        attr::CRASH_CLASS,
        attr::GPU_INDEX,
        attr::SUITE,
        attr::METRIC,
        attr::LEVEL,
        attr::VERDICT,
        attr::MODEL,
        attr::PROVIDER,
        attr::OPERATION,
        attr::TOKEN_TYPE,
        attr::HW_ID,
        attr::HW_TYPE,
        attr::IO_DIRECTION,
    ];
    let mut out: HashSet<String> = keys.iter().map(|k| prometheus_label(k)).collect();
    out.insert("le".into());
    out
}

fn vars_as_regex(d: &Value) -> HashMap<&str, String> {
    d["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .map(|n| (n, ".*".to_string()))
        .collect()
}

#[test]
fn dashboards_are_valid_and_complete() {
    let all = load_all();
    let files: BTreeSet<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "config-comparison.json",
        "fleet.json",
        "regression-history.json",
        "job-timeline.json",
    ] {
        assert!(files.contains(want), "dashboards/{want} missing");
    }
    let mut uids = HashSet::new();
    for (name, d) in &all {
        let uid = d["uid"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no uid"));
        assert!(uids.insert(uid.to_string()), "{name}: uid {uid} used twice");
        assert!(
            !d["title"].as_str().unwrap_or_default().is_empty(),
            "{name}: no title"
        );
        assert!(
            d["schemaVersion"].as_u64().is_some(),
            "{name}: no schemaVersion"
        );
        assert!(
            d.get("id").is_none_or(Value::is_null),
            "{name}: provisioned dashboards carry no id"
        );

        let panels = panels(d);
        assert!(!panels.is_empty(), "{name}: no panels");
        let mut ids = HashSet::new();
        for p in panels {
            let title = p["title"].as_str().unwrap_or_default();
            let id = p["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}/{title}: no id"));
            assert!(ids.insert(id), "{name}: panel id {id} used twice");
            assert!(!title.is_empty(), "{name}: panel {id} has no title");
            if p["type"] == "row" {
                continue;
            }
            let g = &p["gridPos"];
            let (x, y, w, h) = (
                g["x"].as_u64(),
                g["y"].as_u64(),
                g["w"].as_u64(),
                g["h"].as_u64(),
            );
            let (Some(x), Some(_y), Some(w), Some(h)) = (x, y, w, h) else {
                panic!("{name}/{title}: incomplete gridPos {g}");
            };
            assert!(
                w >= 1 && h >= 1 && x + w <= 24,
                "{name}/{title}: gridPos {g} outside 24 columns"
            );
            assert!(
                p["fieldConfig"]["defaults"]["unit"]
                    .as_str()
                    .is_some_and(|u| !u.is_empty()),
                "{name}/{title}: no unit"
            );
            assert!(
                !p["targets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .is_empty(),
                "{name}/{title}: no queries"
            );
        }
    }
}

#[test]
fn datasources_come_from_provisioned_uids_or_variables() {
    let provisioned = provisioned_uids();
    assert_eq!(
        provisioned.get("prometheus").map(String::as_str),
        Some("prometheus")
    );
    assert_eq!(provisioned.get("tempo").map(String::as_str), Some("tempo"));
    for (name, d) in load_all() {
        let mut ds_vars = HashMap::new();
        for v in d["templating"]["list"].as_array().into_iter().flatten() {
            if v["type"] == "datasource" {
                let kind = v["query"].as_str().unwrap().to_string();
                let default = v["current"]["value"].as_str().unwrap_or_default();
                assert_eq!(
                    provisioned.get(default),
                    Some(&kind),
                    "{name}: variable {} defaults to {default:?}, not a provisioned {kind} uid",
                    v["name"]
                );
                ds_vars.insert(format!("${{{}}}", v["name"].as_str().unwrap()), kind);
            }
        }
        let check = |what: &str, ds: &Value| {
            let uid = ds["uid"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}/{what}: datasource without uid: {ds}"));
            let ty = ds["type"].as_str().unwrap_or_default();
            let resolved = ds_vars.get(uid).or_else(|| provisioned.get(uid));
            assert_eq!(
                resolved.map(String::as_str),
                Some(ty),
                "{name}/{what}: datasource {ds} is neither a datasource variable nor a provisioned uid"
            );
        };
        for p in panels(&d) {
            let title = p["title"].as_str().unwrap_or_default();
            if p["type"] == "row" {
                continue;
            }
            check(title, &p["datasource"]);
            for t in p["targets"].as_array().into_iter().flatten() {
                check(title, &t["datasource"]);
                assert_eq!(
                    t["datasource"]["type"], p["datasource"]["type"],
                    "{name}/{title}"
                );
            }
        }
        for v in d["templating"]["list"].as_array().into_iter().flatten() {
            if v["type"] == "query" {
                check(v["name"].as_str().unwrap(), &v["datasource"]);
            }
        }
    }
}

#[test]
fn every_promql_expression_parses_and_names_exported_series() {
    let all = load_all();
    let metrics = exported_metric_names();
    let labels = exported_labels();
    let queries = promql_queries(&all);
    assert!(queries.len() >= 20, "only {} PromQL queries", queries.len());
    for q in &queries {
        let d = &all.iter().find(|(n, _)| *n == q.dashboard).unwrap().1;
        let expr = substitute(&q.text, &vars_as_regex(d));
        assert!(
            !expr.contains('$'),
            "{}/{}: unsubstituted variable in {expr}",
            q.dashboard,
            q.panel
        );
        let ast = promql_parser::parser::parse(&expr)
            .unwrap_or_else(|e| panic!("{}/{} {}: {e}\n{expr}", q.dashboard, q.panel, q.ref_id));
        let used = used_names(&ast);
        assert!(
            !used.metrics.is_empty(),
            "{}/{}: selects no metric",
            q.dashboard,
            q.panel
        );
        for m in &used.metrics {
            assert!(
                metrics.contains(m),
                "{}/{}: {m} is not a metric the controller exports",
                q.dashboard,
                q.panel
            );
        }
        for l in &used.labels {
            assert!(
                labels.contains(l),
                "{}/{}: label {l} is not one the controller sets",
                q.dashboard,
                q.panel
            );
        }
    }
    for (dash, var, q) in variable_queries(&all) {
        let (sel, label) =
            parse_label_values(&q).unwrap_or_else(|| panic!("{dash}: variable {var}: {q}"));
        let d = &all.iter().find(|(n, _)| *n == dash).unwrap().1;
        let ast = promql_parser::parser::parse(&substitute(&sel, &vars_as_regex(d)))
            .unwrap_or_else(|e| panic!("{dash}: variable {var}: {e}"));
        let used = used_names(&ast);
        assert!(
            used.metrics.iter().all(|m| metrics.contains(m)),
            "{dash}: variable {var}: {q}"
        );
        assert!(
            labels.contains(&label),
            "{dash}: variable {var}: label {label}"
        );
    }
}

#[test]
fn a_broken_expression_is_caught() {
    // The checks above would pass vacuously if the parser accepted anything.
    assert!(promql_parser::parser::parse("sum by (le (rate(x[1m]))").is_err());
    let ast = promql_parser::parser::parse(
        "histogram_quantile(0.5, sum by (le, a) (rate(m_bucket{b=~\"x\"}[1m]))) / on (c) n",
    )
    .unwrap();
    let used = used_names(&ast);
    assert_eq!(
        used.metrics,
        BTreeSet::from(["m_bucket".to_string(), "n".to_string()])
    );
    assert_eq!(
        used.labels,
        BTreeSet::from([
            "a".to_string(),
            "b".to_string(),
            "c".to_string(),
            "le".to_string()
        ])
    );
}

#[test]
fn traceql_queries_use_documented_spans_and_attributes() {
    let all = load_all();
    let docs =
        std::fs::read_to_string(fleetbench_testkit::repo_root().join("docs/observability.md"))
            .expect("docs/observability.md");
    let queries = traceql_queries(&all);
    assert!(!queries.is_empty(), "no TraceQL panel");
    for q in &queries {
        assert!(
            q.text.starts_with('{'),
            "{}/{}: {}",
            q.dashboard,
            q.panel,
            q.text
        );
        let opens = q.text.matches('{').count();
        assert_eq!(
            opens,
            q.text.matches('}').count(),
            "{}/{}: unbalanced braces",
            q.dashboard,
            q.panel
        );
        assert_eq!(
            q.text.matches('(').count(),
            q.text.matches(')').count(),
            "{}/{}",
            q.dashboard,
            q.panel
        );
        for a in traceql_span_attributes(&q.text) {
            assert!(
                docs.contains(&format!("`{a}`")),
                "{}/{}: span attribute {a} is not in docs/observability.md",
                q.dashboard,
                q.panel
            );
        }
        for n in traceql_span_names(&q.text) {
            assert!(
                docs.contains(&format!("`{n}`")),
                "{}/{}: span {n} is not in docs/observability.md",
                q.dashboard,
                q.panel
            );
        }
    }
    let timeline = &all
        .iter()
        .find(|(n, _)| n == "job-timeline.json")
        .unwrap()
        .1;
    for p in panels(timeline) {
        for t in p["targets"].as_array().into_iter().flatten() {
            if t["datasource"]["type"] == "tempo" {
                assert_eq!(t["queryType"], "traceql", "{}", p["title"]);
                assert!(["spans", "traces"].contains(&t["tableType"].as_str().unwrap_or_default()));
            }
        }
    }
}

#[test]
fn dashboard_provider_points_where_compose_mounts_the_files() {
    let text =
        std::fs::read_to_string(dashboards_dir().join("provisioning/dashboards/fleetbench.yaml"))
            .unwrap();
    let v: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let path = v["providers"][0]["options"]["path"].as_str().unwrap();
    let compose = std::fs::read_to_string(
        fleetbench_testkit::repo_root().join("deploy/compose/docker-compose.yaml"),
    )
    .unwrap();
    assert!(
        compose.contains(&format!("../../dashboards:{path}")),
        "compose must mount dashboards/ at {path}"
    );
}

/// The relations a SQL query reads (`FROM x`, `JOIN x`), lower-cased.
fn sql_relations(sql: &str) -> Vec<String> {
    let words: Vec<String> = sql
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    words
        .windows(2)
        .filter(|w| w[0] == "from" || w[0] == "join")
        .map(|w| w[1].clone())
        .collect()
}

#[test]
fn sql_queries_read_only_the_documented_result_views() {
    // The views of the store's migration 7: Grafana's login may read these and nothing else.
    let migration = std::fs::read_to_string(
        fleetbench_testkit::repo_root()
            .join("controller/src/store/migrations/postgres/0007_result_views.sql"),
    )
    .unwrap();
    let docs =
        std::fs::read_to_string(fleetbench_testkit::repo_root().join("docs/observability.md"))
            .unwrap();
    let all = load_all();
    let mut queries: Vec<(String, String)> = sql_queries(&all)
        .into_iter()
        .map(|q| (format!("{}/{}", q.dashboard, q.panel), q.text))
        .collect();
    queries.extend(
        sql_variable_queries(&all)
            .into_iter()
            .map(|(d, v, q)| (format!("{d}/variable {v}"), q)),
    );
    assert!(queries.len() >= 20, "only {} SQL queries", queries.len());
    for (what, sql) in &queries {
        assert!(!sql.trim().is_empty(), "{what}: empty SQL");
        let rels = sql_relations(sql);
        assert!(!rels.is_empty(), "{what}: reads nothing: {sql}");
        for r in rels {
            assert!(
                migration.contains(&format!("CREATE VIEW {r} AS")),
                "{what}: reads {r}, which is not a result view of migration 7"
            );
            assert!(
                migration.contains(&format!("{r},")) || migration.contains(&format!("{r} TO")),
                "{what}: {r} is not granted to Grafana's login"
            );
            assert!(
                docs.contains(&format!("`{r}`")),
                "{what}: view {r} is not in the docs"
            );
        }
    }
    // A broken query is caught: a table behind the views is refused.
    assert!(
        sql_relations("SELECT * FROM levels")
            .iter()
            .all(|r| !migration.contains(&format!("CREATE VIEW {r} AS")))
    );
}
