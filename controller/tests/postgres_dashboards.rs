//! The comparison dashboard against a real PostgreSQL (`FLEETBENCH_TEST_POSTGRES_URL`, a fresh
//! database per run): a controller stores two finished jobs (a concurrency sweep with a config
//! that crashes at its highest level, two repeats; a request-rate sweep), is shut down and
//! started again on the same store, and then EVERY SQL query of the dashboard (panels and
//! template variables, extracted from `dashboards/config-comparison.json`, with Grafana's
//! macros and variables expanded as Grafana expands them) runs against the store and returns
//! rows; the per-level table and the bar charts hold the numbers `fleetbench compare --json`
//! prints for the same jobs, concurrency sorts as a number, and request-rate levels sit on
//! their own axis.
//!
//! The request-rate job's figure columns are cleared before the restart, as if its levels had
//! been stored by a controller older than schema version 7: the restarted controller fills them
//! from the stored results, so past jobs show up in the dashboard too.

mod common;
mod dashboards_common;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::Duration;

use fleetbench_proto::controllerpb::{JobState, SubmitJobRequest};
use serde_json::Value;
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{Column, Row, TypeInfo, ValueRef};

const SWEEP: &str = r#"name = "pg-sweep"
repeats = 2

[hosts]
names = ["h1"]

[[configs]]
name = "steady"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 20, "--itl-ms" = 4 }

[[configs]]
name = "fragile"
extends = "steady"
flags = { "--crash-above-batch" = 2, "--itl-ms" = 5 }

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [1, 2, 4, 16]
requests = 16
"#;

const RATES: &str = r#"name = "pg-rates"
repeats = 1

[hosts]
names = ["h1"]

[[configs]]
name = "steady"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 20, "--itl-ms" = 4 }

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = 16

[load]
request_rate = [4, 16]
requests = 12
"#;

/// A column of a result row as JSON (numbers stay numbers, NULL is null).
fn cell(row: &PgRow, i: usize) -> Value {
    let ty = row.columns()[i].type_info().name().to_string();
    match ty.as_str() {
        "INT8" => row
            .try_get::<Option<i64>, _>(i)
            .unwrap()
            .map_or(Value::Null, Value::from),
        "INT4" => row
            .try_get::<Option<i32>, _>(i)
            .unwrap()
            .map_or(Value::Null, Value::from),
        "FLOAT8" => row
            .try_get::<Option<f64>, _>(i)
            .unwrap()
            .map_or(Value::Null, Value::from),
        "NUMERIC" => panic!(
            "column {} is NUMERIC: Grafana would get a string; cast it",
            row.columns()[i].name()
        ),
        "BOOL" => row
            .try_get::<Option<bool>, _>(i)
            .unwrap()
            .map_or(Value::Null, Value::from),
        "TEXT" | "VARCHAR" => row
            .try_get::<Option<String>, _>(i)
            .unwrap()
            .map_or(Value::Null, Value::from),
        // Grafana's time column; its value is not compared here, only its presence.
        "TIMESTAMPTZ" => {
            if row.try_get_raw(i).unwrap().is_null() {
                Value::Null
            } else {
                Value::from("timestamptz")
            }
        }
        other => panic!("column {} of type {other}", row.columns()[i].name()),
    }
}

async fn run_sql(pool: &PgPool, sql: &str) -> Vec<BTreeMap<String, Value>> {
    let rows = sqlx::query(sql)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("{e}\n    {sql}"));
    rows.iter()
        .map(|r| {
            (0..r.columns().len())
                .map(|i| (r.columns()[i].name().to_string(), cell(r, i)))
                .collect()
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// `fleetbench compare --json` of these jobs against the controller at `addr`.
fn cli_compare(addr: std::net::SocketAddr, jobs: &[&str], dir: &std::path::Path) -> Value {
    let out = Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
        .arg("compare")
        .args(jobs)
        .args(["--controller", &format!("http://{addr}"), "--json"])
        .args(["--data-dir", dir.join("cli-data").to_str().unwrap()])
        .output()
        .expect("run fleetbench compare");
    assert!(
        out.status.success(),
        "fleetbench compare: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("compare --json prints JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_comparison_dashboard_reads_compares_numbers_from_postgres_after_a_restart() {
    let db = common::TestDatabase::create("dash").await;
    let url = db.url.clone();
    let admin = PgPool::connect(&std::env::var("FLEETBENCH_TEST_POSTGRES_URL").unwrap())
        .await
        .expect("connect to the test PostgreSQL");
    // Grafana's login (deploy/compose creates it): the store's migration grants it the views.
    sqlx::raw_sql(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fleetbench_grafana') \
         THEN CREATE ROLE fleetbench_grafana LOGIN; END IF; END $$",
    )
    .execute(&admin)
    .await
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let agent = common::spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let config = common::config_with_hosts(&url, &[&agent]);
    let handle = fleetbench_controller::start(
        config.clone(),
        fleetbench_controller::metrics::Metrics::new(),
    )
    .await
    .expect("controller");
    let mut client = common::client(handle.addr).await;
    let mut ids = Vec::new();
    for (spec, file) in [(SWEEP, "pg-sweep.toml"), (RATES, "pg-rates.toml")] {
        let resp = client
            .submit_job(SubmitJobRequest {
                spec_toml: spec.into(),
                file_name: file.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(resp.errors.is_empty(), "{:?}", resp.errors);
        ids.push(resp.job_id);
    }
    for id in &ids {
        let job = common::wait_job(&mut client, id, Duration::from_secs(240)).await;
        assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    }
    handle.shutdown().await;

    // The request-rate job as a pre-version-7 controller left it: no figure columns.
    let pool = PgPool::connect(&url).await.unwrap();
    let cleared = sqlx::query("UPDATE levels SET figures = 0, concurrency = NULL, request_rate = NULL, output_tokens_per_s = NULL WHERE job_id = $1")
        .bind(&ids[1])
        .execute(&pool)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(cleared, 2, "the request-rate job stored two levels");
    sqlx::query("DELETE FROM level_latencies WHERE job_id = $1")
        .bind(&ids[1])
        .execute(&pool)
        .await
        .unwrap();
    let visible = run_sql(
        &pool,
        &format!(
            "SELECT * FROM fleetbench_level_results WHERE job_id = '{}'",
            ids[1]
        ),
    )
    .await;
    assert!(visible.is_empty(), "unfilled levels stay out of the views");

    // The restart: a new controller on the same store (and a new agent connection).
    let handle =
        fleetbench_controller::start(config, fleetbench_controller::metrics::Metrics::new())
            .await
            .expect("restarted controller");

    // Grafana's view of it: the variables first, in order, then every panel query.
    let dashboards = dashboards_common::load_all();
    let (_, dash) = dashboards
        .iter()
        .find(|(n, _)| n == "config-comparison.json")
        .unwrap();
    let from = "2000-01-01T00:00:00Z";
    let to = chrono::Utc::now()
        .checked_add_signed(chrono::TimeDelta::minutes(1))
        .unwrap()
        .to_rfc3339();
    let mut vars: HashMap<&str, Vec<String>> = HashMap::new();
    let var_queries = dashboards_common::sql_variable_queries(std::slice::from_ref(&(
        "config-comparison.json".to_string(),
        dash.clone(),
    )));
    assert_eq!(
        var_queries.iter().map(|v| v.1.as_str()).collect::<Vec<_>>(),
        ["job", "workload", "config"]
    );
    for (_, var, q) in &var_queries {
        let sql = dashboards_common::substitute_sql(q, &vars, from, &to);
        let rows = run_sql(&pool, &sql).await;
        let values: Vec<String> = rows
            .iter()
            .map(|r| {
                r.get("__value")
                    .or_else(|| r.values().next())
                    .and_then(Value::as_str)
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert!(!values.is_empty(), "variable {var}: {sql} finds no value");
        let name: &str = var_queries
            .iter()
            .find(|v| &v.1 == var)
            .map(|v| v.1.as_str())
            .unwrap();
        vars.insert(name, values);
    }
    let mut job_values = vars["job"].clone();
    job_values.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(job_values, want, "the job variable lists both past jobs");

    let queries = dashboards_common::sql_queries(std::slice::from_ref(&(
        "config-comparison.json".to_string(),
        dash.clone(),
    )));
    assert!(queries.len() >= 15, "only {} SQL queries", queries.len());
    let mut by_panel: HashMap<String, Vec<BTreeMap<String, Value>>> = HashMap::new();
    let mut empty = Vec::new();
    for q in &queries {
        let sql = dashboards_common::substitute_sql(&q.text, &vars, from, &to);
        assert!(!sql.contains('$'), "{}: unexpanded macro in {sql}", q.panel);
        let rows = run_sql(&pool, &sql).await;
        if rows.is_empty() {
            empty.push(q.panel.clone());
        }
        by_panel.insert(q.panel.clone(), rows);
    }
    // The simulated engine reports no prefix-cache figures: that panel alone may be empty.
    assert!(
        empty.iter().all(|p| p.starts_with("Prefix-cache")),
        "panels without rows: {empty:?}"
    );

    // The numbers are compare's: every (job, config, level) of `compare --json`.
    let compare = cli_compare(handle.addr, &[&ids[0], &ids[1]], dir.path());
    let table = &by_panel["Every config at every level"];
    let mut matched = 0;
    let mut rate_levels = 0;
    for g in compare["groups"].as_array().unwrap() {
        let conc = g["level"]["concurrency"].as_i64();
        let rate = g["level"]["request_rate"].as_f64();
        for c in g["configs"].as_array().unwrap() {
            let row = table
                .iter()
                .find(|r| {
                    r["job_id"] == c["job_id"]
                        && r["config_name"].as_str().unwrap()
                            == c["config_name"]
                                .as_str()
                                .unwrap()
                                .split('@')
                                .next()
                                .unwrap()
                        && r["workload"] == g["workload"]
                        && r["concurrency"].as_i64() == conc
                        && r["request_rate"].as_f64() == rate
                })
                .unwrap_or_else(|| panic!("no dashboard row for {c} at {}", g["level"]));
            let ok_repeats = row["repeats_ok"].as_i64().unwrap();
            for key in [
                "output_tokens_per_s",
                "output_tokens_per_s_spread",
                "requests_per_s",
                "ttft_p50_ms",
                "ttft_p99_ms",
                "itl_p50_ms",
                "itl_p99_ms",
                "e2e_p50_ms",
                "e2e_p99_ms",
                "error_rate",
                "gpu_power_w",
            ] {
                let cli = &c[key];
                let sql = &row[key];
                match (cli.as_f64(), sql.as_f64()) {
                    (Some(a), Some(b)) => assert!(
                        close(a, b),
                        "{key}: compare {a}, dashboard {b}: {c}\n{row:?}"
                    ),
                    // compare prints 0 where no repeat ran to the end; the view says NULL.
                    (Some(a), None) => assert!(
                        a == 0.0 && ok_repeats == 0 && key != "error_rate",
                        "{key}: compare {a}, dashboard NULL: {row:?}"
                    ),
                    (None, b) => assert_eq!(b, None, "{key}: compare null, dashboard {sql}"),
                }
            }
            assert_eq!(row["errors"].as_u64(), c["errors"].as_u64(), "{row:?}");
            assert_eq!(row["crashed"], c["crashed"], "{row:?}");
            assert_eq!(row["repeats"].as_u64(), c["repeats"].as_u64(), "{row:?}");
            matched += 1;
            if rate.is_some() {
                rate_levels += 1;
            }
        }
    }
    assert_eq!(
        matched,
        table.len(),
        "every dashboard row is one of compare's"
    );
    // 2 configs x 4 concurrencies + 1 config x 2 rates.
    assert_eq!(matched, 10);
    assert_eq!(rate_levels, 2, "the back-filled request-rate job is back");
    assert!(
        table.iter().any(|r| r["crashed"] == true),
        "the fragile config's crash is in the table"
    );

    // Concurrency is a number on its axis, in numeric order (1, 2, 4, 16; not 1, 16, 2, 4);
    // request rates are on their own panels and only there.
    let bars = &by_panel["Output throughput by concurrency"];
    let xs: Vec<i64> = bars
        .iter()
        .map(|r| {
            r["concurrency"]
                .as_i64()
                .expect("concurrency is an integer column")
        })
        .collect();
    let mut sorted = xs.clone();
    sorted.sort();
    assert_eq!(xs, sorted, "bars in numeric order");
    assert_eq!(
        xs.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        [1, 2, 4, 16].into_iter().collect()
    );
    let rate_bars = &by_panel["Output throughput by request rate"];
    let rs: Vec<f64> = rate_bars
        .iter()
        .map(|r| {
            r["request_rate"]
                .as_f64()
                .expect("request_rate is a number")
        })
        .collect();
    assert_eq!(rs, [4.0, 16.0], "{rate_bars:?}");
    for r in bars {
        let c = compare["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["level"]["concurrency"].as_i64() == r["concurrency"].as_i64())
            .and_then(|g| {
                g["configs"].as_array().unwrap().iter().find(|c| {
                    c["config_name"]
                        .as_str()
                        .unwrap()
                        .starts_with(r["config_name"].as_str().unwrap())
                })
            })
            .unwrap();
        assert!(close(
            r["output_tokens_per_s"].as_f64().unwrap(),
            c["output_tokens_per_s"].as_f64().unwrap()
        ));
    }

    // The regression dashboard over the same store: a suite run (the sweep) against a baseline
    // (the sweep again, so each level's baseline figure is its own).
    sqlx::query(
        "INSERT INTO suite_runs (job_id, suite, tag, passed, regressions, baseline_job_id, \
         created_unix_ms, verdicts) VALUES ($1, 'pg-suite', 'v1', 1, 0, $1, $2, '')",
    )
    .bind(&ids[0])
    .bind(fleetbench_proto::now_unix_ms())
    .execute(&pool)
    .await
    .unwrap();
    let (_, reg) = dashboards
        .iter()
        .find(|(n, _)| n == "regression-history.json")
        .unwrap();
    let reg_set = [("regression-history.json".to_string(), reg.clone())];
    let mut reg_vars: HashMap<&str, Vec<String>> = HashMap::new();
    for (_, var, q) in dashboards_common::sql_variable_queries(&reg_set) {
        let rows = run_sql(
            &pool,
            &dashboards_common::substitute_sql(&q, &reg_vars, from, &to),
        )
        .await;
        let values: Vec<String> = rows
            .iter()
            .map(|r| {
                r.values()
                    .next()
                    .and_then(Value::as_str)
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(values, ["pg-suite"], "variable {var}");
        reg_vars.insert("suite", values);
    }
    let reg_queries = dashboards_common::sql_queries(&reg_set);
    assert!(reg_queries.len() >= 5, "{reg_queries:?}");
    for q in &reg_queries {
        let sql = dashboards_common::substitute_sql(&q.text, &reg_vars, from, &to);
        let rows = run_sql(&pool, &sql).await;
        assert!(!rows.is_empty(), "{}: no rows\n    {sql}", q.panel);
    }
    let against = run_sql(
        &pool,
        &dashboards_common::substitute_sql(
            &reg_queries
                .iter()
                .find(|q| q.panel == "Output throughput against baseline")
                .unwrap()
                .text,
            &reg_vars,
            from,
            &to,
        ),
    )
    .await;
    for r in &against {
        assert!(
            r["value"].as_f64().unwrap().abs() < 1e-9,
            "a run against itself: {r:?}"
        );
    }

    // Grafana's login reads the views and nothing behind them.
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let host_db = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let reader = PgPool::connect(&format!("{scheme}://fleetbench_grafana@{host_db}"))
        .await
        .expect("connect as fleetbench_grafana");
    for view in [
        "fleetbench_jobs",
        "fleetbench_level_results",
        "fleetbench_compare_levels",
        "fleetbench_suite_runs",
        "fleetbench_regression_runs",
    ] {
        let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {view}"))
            .fetch_one(&reader)
            .await
            .unwrap_or_else(|e| panic!("{view}: {e}"));
        assert!(n > 0, "{view} is empty for Grafana");
    }
    for table in ["levels", "jobs", "runs", "events", "agents"] {
        let err = sqlx::query(&format!("SELECT * FROM {table} LIMIT 1"))
            .fetch_all(&reader)
            .await
            .expect_err("Grafana's login must not read the tables");
        assert!(
            err.to_string().contains("permission denied"),
            "{table}: {err}"
        );
    }
    reader.close().await;

    handle.shutdown().await;
    pool.close().await;
    drop(agent);
    admin.close().await;
    db.remove().await;
}
