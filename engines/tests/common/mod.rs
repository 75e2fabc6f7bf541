//! Shared helpers: fixture paths and fact lookup.

#![allow(dead_code)]

use std::path::PathBuf;

use fleetbench_engines::LogFact;

pub fn fixture(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn fixture_lines(rel: &str) -> Vec<String> {
    fixture(rel).lines().map(str::to_string).collect()
}

/// Every value of `key`, in order.
pub fn values<'a>(facts: &'a [LogFact], key: &str) -> Vec<&'a str> {
    facts
        .iter()
        .filter(|f| f.key == key)
        .map(|f| f.value.as_str())
        .collect()
}

/// The only value of `key`; panics when there is none or more than one.
pub fn one<'a>(facts: &'a [LogFact], key: &str) -> &'a str {
    let v = values(facts, key);
    assert_eq!(v.len(), 1, "{key}: {v:?} in {facts:#?}");
    v[0]
}
