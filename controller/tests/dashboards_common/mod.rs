//! Reading the Grafana dashboards of `dashboards/`: their panels, PromQL and TraceQL queries,
//! and the substitution of template variables. Shared by `dashboards.rs` (static checks) and
//! `prometheus_dashboards.rs` (every query against a real Prometheus).
#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use serde_json::Value;

pub fn dashboards_dir() -> PathBuf {
    fleetbench_testkit::repo_root().join("dashboards")
}

/// Every dashboard file, sorted, with its parsed JSON.
pub fn load_all() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dashboards_dir())
        .expect("dashboards/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: invalid JSON: {e}"));
            (name, v)
        })
        .collect()
}

/// Panels, with those nested in collapsed rows.
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        out.push(p);
        for inner in p["panels"].as_array().into_iter().flatten() {
            out.push(inner);
        }
    }
    out
}

/// One query of one panel.
#[derive(Debug, Clone)]
pub struct Query {
    pub dashboard: String,
    pub panel: String,
    pub ref_id: String,
    pub text: String,
    pub instant: bool,
}

fn queries_of(dashboards: &[(String, Value)], kind: &str, field: &str) -> Vec<Query> {
    let mut out = Vec::new();
    for (name, d) in dashboards {
        for p in panels(d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                let ds_type = t["datasource"]["type"]
                    .as_str()
                    .or_else(|| p["datasource"]["type"].as_str())
                    .unwrap_or_default();
                if ds_type != kind {
                    continue;
                }
                out.push(Query {
                    dashboard: name.clone(),
                    panel: p["title"].as_str().unwrap_or_default().to_string(),
                    ref_id: t["refId"].as_str().unwrap_or_default().to_string(),
                    text: t[field].as_str().unwrap_or_default().to_string(),
                    instant: t["instant"].as_bool().unwrap_or(false),
                });
            }
        }
    }
    out
}

/// Every PromQL expression of every panel, and of every annotation query.
pub fn promql_queries(dashboards: &[(String, Value)]) -> Vec<Query> {
    let mut out = queries_of(dashboards, "prometheus", "expr");
    for (name, d) in dashboards {
        for a in d["annotations"]["list"].as_array().into_iter().flatten() {
            if a["datasource"]["type"] != "prometheus" {
                continue;
            }
            out.push(Query {
                dashboard: name.clone(),
                panel: format!("annotation {}", a["name"].as_str().unwrap_or_default()),
                ref_id: a["refId"].as_str().unwrap_or_default().to_string(),
                text: a["expr"].as_str().unwrap_or_default().to_string(),
                instant: false,
            });
        }
    }
    out
}

/// Every TraceQL query of every panel.
pub fn traceql_queries(dashboards: &[(String, Value)]) -> Vec<Query> {
    queries_of(dashboards, "tempo", "query")
}

/// The datasource type of Grafana's PostgreSQL data source.
pub const POSTGRES: &str = "grafana-postgresql-datasource";

/// Every SQL query of every panel (PostgreSQL data source).
pub fn sql_queries(dashboards: &[(String, Value)]) -> Vec<Query> {
    queries_of(dashboards, POSTGRES, "rawSql")
}

/// The Prometheus template variables' queries (`label_values(...)`), as (dashboard, name, query).
pub fn variable_queries(dashboards: &[(String, Value)]) -> Vec<(String, String, String)> {
    variable_queries_of(dashboards, "prometheus")
}

/// The PostgreSQL template variables' queries (SQL), as (dashboard, name, query), in order.
pub fn sql_variable_queries(dashboards: &[(String, Value)]) -> Vec<(String, String, String)> {
    variable_queries_of(dashboards, POSTGRES)
}

fn variable_queries_of(
    dashboards: &[(String, Value)],
    kind: &str,
) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (name, d) in dashboards {
        for v in d["templating"]["list"].as_array().into_iter().flatten() {
            if v["type"] == "query" && v["datasource"]["type"] == kind {
                let q = v["query"]["query"]
                    .as_str()
                    .or_else(|| v["query"].as_str())
                    .unwrap_or_default();
                out.push((
                    name.clone(),
                    v["name"].as_str().unwrap_or_default().to_string(),
                    q.to_string(),
                ));
            }
        }
    }
    out
}

/// Replaces Grafana's built-in interval variables and the given template variables (`$x` and
/// `${x}`) in a query.
pub fn substitute(query: &str, vars: &HashMap<&str, String>) -> String {
    let mut s = query
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "15s")
        .replace("$__range", "1h");
    // Longest names first, so `$jobs` is not cut by `$job`.
    let mut names: Vec<&&str> = vars.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for n in names {
        s = s.replace(&format!("${{{n}}}"), &vars[*n]);
        s = s.replace(&format!("${n}"), &vars[*n]);
    }
    s
}

/// Grafana's SQL macros and template variables in a PostgreSQL query, as Grafana expands them:
/// `$__timeFilter(col)` → `col BETWEEN '<from>' AND '<to>'` (RFC 3339), `$__timeFrom()`,
/// `$__timeTo()`; a multi-value variable → its values quoted and comma-separated (`'a','b'`).
pub fn substitute_sql(
    query: &str,
    vars: &HashMap<&str, Vec<String>>,
    from_rfc3339: &str,
    to_rfc3339: &str,
) -> String {
    let mut s = query
        .replace("$__timeFrom()", &format!("'{from_rfc3339}'"))
        .replace("$__timeTo()", &format!("'{to_rfc3339}'"));
    while let Some(at) = s.find("$__timeFilter(") {
        let rest = &s[at + "$__timeFilter(".len()..];
        let close = rest.find(')').expect("$__timeFilter( is closed");
        let col = rest[..close].trim().to_string();
        s = format!(
            "{}{col} BETWEEN '{from_rfc3339}' AND '{to_rfc3339}'{}",
            &s[..at],
            &rest[close + 1..]
        );
    }
    let quoted: HashMap<&str, String> = vars
        .iter()
        .map(|(k, vs)| {
            let list: Vec<String> = vs
                .iter()
                .map(|v| format!("'{}'", v.replace('\'', "''")))
                .collect();
            (*k, list.join(","))
        })
        .collect();
    substitute(&s, &quoted)
}

/// Metric names and label names a PromQL expression selects or groups by.
#[derive(Debug, Default)]
pub struct Used {
    pub metrics: BTreeSet<String>,
    pub labels: BTreeSet<String>,
}

pub fn used_names(expr: &promql_parser::parser::Expr) -> Used {
    let mut used = Used::default();
    walk(expr, &mut used);
    used
}

fn selector(vs: &promql_parser::parser::VectorSelector, used: &mut Used) {
    if let Some(n) = &vs.name {
        used.metrics.insert(n.clone());
    }
    for m in vs
        .matchers
        .matchers
        .iter()
        .chain(vs.matchers.or_matchers.iter().flatten())
    {
        if m.name == "__name__" {
            used.metrics.insert(m.value.clone());
        } else {
            used.labels.insert(m.name.clone());
        }
    }
}

fn walk(expr: &promql_parser::parser::Expr, used: &mut Used) {
    use promql_parser::parser::Expr;
    match expr {
        Expr::Aggregate(a) => {
            if let Some(m) = &a.modifier {
                used.labels.extend(m.labels().labels.iter().cloned());
            }
            if let Some(p) = &a.param {
                walk(p, used);
            }
            walk(&a.expr, used);
        }
        Expr::Unary(u) => walk(&u.expr, used),
        Expr::Binary(b) => {
            if let Some(m) = b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
                used.labels.extend(m.labels().labels.iter().cloned());
            }
            walk(&b.lhs, used);
            walk(&b.rhs, used);
        }
        Expr::Paren(p) => walk(&p.expr, used),
        Expr::Subquery(s) => walk(&s.expr, used),
        Expr::VectorSelector(vs) => selector(vs, used),
        Expr::MatrixSelector(ms) => selector(&ms.vs, used),
        Expr::Call(c) => {
            for a in &c.args.args {
                walk(a, used);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// `label_values(metric{...}, label)` → (selector, label).
pub fn parse_label_values(q: &str) -> Option<(String, String)> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (sel, label) = inner.rsplit_once(',')?;
    Some((sel.trim().to_string(), label.trim().to_string()))
}

/// The `span.…` attribute names a TraceQL query filters on or selects.
pub fn traceql_span_attributes(q: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = q;
    while let Some(i) = rest.find("span.") {
        let before = rest[..i].chars().last();
        let tail = &rest[i + "span.".len()..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            out.insert(tail[..end].trim_end_matches('.').to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// The span names a TraceQL query asks for (`name = "…"`).
pub fn traceql_span_names(q: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = q;
    while let Some(i) = rest.find("name = \"") {
        let tail = &rest[i + "name = \"".len()..];
        let end = tail.find('"').unwrap_or(tail.len());
        let before = rest[..i].chars().last();
        if !before.is_some_and(|c| c == '.' || c.is_ascii_alphanumeric() || c == '_') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}
