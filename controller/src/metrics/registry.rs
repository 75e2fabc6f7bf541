//! The values behind `/metrics`: one family per catalogued metric, one series per attribute set,
//! rendered in the Prometheus text exposition format (0.0.4) under the collector's names.
//!
//! A family's series are kept by host (the `fleetbench.host` attribute) in hash maps: with a
//! thousand busy hosts every telemetry sample sets a few hundred series, and a trial's end drops
//! its host's series; a sorted map of all series made both a walk over every host's labels.
//! `/metrics` sorts when it renders (a scrape is rare next to the updates).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Mutex;

use super::names::{Kind, MetricDesc, attr, prometheus_label};

/// Attribute set of one series: (key, value) pairs sorted by key.
pub type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone)]
enum Value {
    Scalar(f64),
    Histogram {
        counts: Vec<u64>,
        sum: f64,
        count: u64,
    },
}

#[derive(Debug, Default)]
struct Family {
    /// Series by the value of their host attribute ("" when they have none).
    by_host: HashMap<String, HashMap<Labels, Value>>,
}

impl Family {
    /// The series of `labels` (normalised), made with `new` when absent.
    fn entry(&mut self, labels: Labels, new: impl FnOnce() -> Value) -> &mut Value {
        let host = labels
            .iter()
            .find(|(k, _)| *k == attr::HOST)
            .map_or("", |(_, v)| v.as_str());
        if !self.by_host.contains_key(host) {
            self.by_host.insert(host.to_string(), HashMap::new());
        }
        let shard = self.by_host.get_mut(host).expect("inserted above");
        shard.entry(labels).or_insert_with(new)
    }

    fn get_mut(&mut self, labels: &Labels) -> Option<&mut Value> {
        let host = labels
            .iter()
            .find(|(k, _)| *k == attr::HOST)
            .map_or("", |(_, v)| v.as_str());
        self.by_host.get_mut(host)?.get_mut(labels)
    }

    fn get(&self, labels: &Labels) -> Option<&Value> {
        let host = labels
            .iter()
            .find(|(k, _)| *k == attr::HOST)
            .map_or("", |(_, v)| v.as_str());
        self.by_host.get(host)?.get(labels)
    }

    fn retain(&mut self, pred: &impl Fn(&Labels) -> bool) {
        for shard in self.by_host.values_mut() {
            shard.retain(|labels, _| !pred(labels));
        }
        self.by_host.retain(|_, shard| !shard.is_empty());
    }

    fn is_empty(&self) -> bool {
        self.by_host.is_empty()
    }
}

/// Thread-safe store of every series, keyed by the metric's OpenTelemetry name.
#[derive(Debug, Default)]
pub struct Registry {
    families: Mutex<BTreeMap<&'static str, Family>>,
}

/// Labels as the registry keys series: empty values left out, sorted by key, one per key.
pub(crate) fn normalise(mut labels: Labels) -> Labels {
    labels.retain(|(_, v)| !v.is_empty());
    labels.sort();
    labels.dedup_by(|a, b| a.0 == b.0);
    labels
}

impl Registry {
    fn with_family<R>(&self, desc: &'static MetricDesc, f: impl FnOnce(&mut Family) -> R) -> R {
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        f(families.entry(desc.name).or_default())
    }

    /// Sets a gauge.
    pub fn set(&self, desc: &'static MetricDesc, labels: Labels, value: f64) {
        debug_assert_eq!(desc.kind, Kind::Gauge, "{}", desc.name);
        if !value.is_finite() {
            return;
        }
        self.with_family(desc, |f| {
            *f.entry(normalise(labels), || Value::Scalar(value)) = Value::Scalar(value);
        });
    }

    /// Sets a gauge whose `labels` are already [`normalise`]d: nothing is allocated unless the
    /// series is new.
    pub fn set_normalised(&self, desc: &'static MetricDesc, labels: &Labels, value: f64) {
        debug_assert_eq!(desc.kind, Kind::Gauge, "{}", desc.name);
        if !value.is_finite() {
            return;
        }
        self.with_family(desc, |f| match f.get_mut(labels) {
            Some(v) => *v = Value::Scalar(value),
            None => {
                f.entry(labels.clone(), || Value::Scalar(value));
            }
        });
    }

    /// Adds to a counter (negative or non-finite increments are ignored, as in OpenTelemetry).
    pub fn add(&self, desc: &'static MetricDesc, labels: Labels, delta: f64) {
        debug_assert_eq!(desc.kind, Kind::Counter, "{}", desc.name);
        if !(delta.is_finite() && delta >= 0.0) {
            return;
        }
        self.with_family(desc, |f| {
            let v = f.entry(normalise(labels), || Value::Scalar(0.0));
            if let Value::Scalar(x) = v {
                *x += delta;
            }
        });
    }

    /// Records observations into a histogram.
    pub fn observe(&self, desc: &'static MetricDesc, labels: Labels, values: &[f64]) {
        debug_assert_eq!(desc.kind, Kind::Histogram, "{}", desc.name);
        self.with_family(desc, |f| {
            let v = f.entry(normalise(labels), || Value::Histogram {
                counts: vec![0; desc.buckets.len() + 1],
                sum: 0.0,
                count: 0,
            });
            if let Value::Histogram { counts, sum, count } = v {
                for &x in values.iter().filter(|x| x.is_finite()) {
                    // Bucket i holds values <= bounds[i] (Prometheus `le`), the last is +Inf.
                    let i = desc.buckets.partition_point(|&b| b < x);
                    counts[i] += 1;
                    *sum += x;
                    *count += 1;
                }
            }
        });
    }

    /// Drops the series of `desc` whose labels match `pred` (a host that changed config).
    pub fn remove_where(&self, desc: &'static MetricDesc, pred: impl Fn(&Labels) -> bool) {
        self.with_family(desc, |f| f.retain(&pred));
    }

    /// Drops the series of every metric in `descs` whose host attribute is `host`: only that
    /// host's series are looked at.
    pub fn remove_host(&self, descs: &[&'static MetricDesc], host: &str) {
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        for d in descs {
            if let Some(f) = families.get_mut(d.name) {
                f.by_host.remove(host);
            }
        }
    }

    /// Drops the series of every metric in `descs` whose labels match `pred` (an expired job,
    /// a lost host).
    pub fn remove_all_where(&self, descs: &[&'static MetricDesc], pred: impl Fn(&Labels) -> bool) {
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        for d in descs {
            if let Some(f) = families.get_mut(d.name) {
                f.retain(&pred);
            }
        }
    }

    /// Current value of a gauge or counter series (tests and callers that need to read back).
    pub fn value(&self, desc: &'static MetricDesc, labels: Labels) -> Option<f64> {
        let families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        match families.get(desc.name)?.get(&normalise(labels))? {
            Value::Scalar(v) => Some(*v),
            Value::Histogram { .. } => None,
        }
    }

    /// The text exposition of `catalog`, in its order; metrics with no series are left out.
    pub fn render(&self, catalog: impl IntoIterator<Item = &'static MetricDesc>) -> String {
        let families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        for desc in catalog {
            let Some(family) = families.get(desc.name).filter(|f| !f.is_empty()) else {
                continue;
            };
            let name = desc.prometheus_name();
            let kind = match desc.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let _ = writeln!(out, "# HELP {name} {}", escape_help(desc.help));
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let sorted: BTreeMap<&Labels, &Value> = family
                .by_host
                .values()
                .flat_map(|shard| shard.iter())
                .collect();
            for (labels, value) in sorted {
                match value {
                    Value::Scalar(v) => {
                        let _ = writeln!(out, "{name}{} {}", label_text(labels, None), num(*v));
                    }
                    Value::Histogram { counts, sum, count } => {
                        let mut cumulative = 0u64;
                        for (i, c) in counts.iter().enumerate() {
                            cumulative += c;
                            let le = desc.buckets.get(i).map_or("+Inf".to_string(), |b| num(*b));
                            let _ = writeln!(
                                out,
                                "{name}_bucket{} {cumulative}",
                                label_text(labels, Some(&le))
                            );
                        }
                        let l = label_text(labels, None);
                        let _ = writeln!(out, "{name}_sum{l} {}", num(*sum));
                        let _ = writeln!(out, "{name}_count{l} {count}");
                    }
                }
            }
        }
        out
    }
}

fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_text(labels: &Labels, le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{}=\"{}\"", prometheus_label(k), escape_value(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::super::names::{self, attr};
    use super::*;

    #[test]
    fn renders_counters_gauges_and_histograms_with_collector_names() {
        let r = Registry::default();
        r.add(
            &names::JOBS_SUBMITTED,
            vec![(attr::JOB_KIND, "sweep".into())],
            1.0,
        );
        r.add(
            &names::JOBS_SUBMITTED,
            vec![(attr::JOB_KIND, "sweep".into())],
            2.0,
        );
        r.set(
            &names::GPU_POWER,
            vec![
                (attr::HOST, "gpu-a".into()),
                (attr::HW_ID, "GPU-1\"x".into()),
            ],
            312.5,
        );
        r.observe(
            &names::CLIENT_TTFC,
            vec![(attr::CONFIG_NAME, "base".into())],
            &[0.0005, 0.03, 0.03, 100.0],
        );
        let text = r.render(names::all());
        assert!(
            text.contains("# TYPE fleetbench_jobs_submitted_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("fleetbench_jobs_submitted_total{fleetbench_job_kind=\"sweep\"} 3\n")
        );
        assert!(
            text.contains("hw_power_watts{fleetbench_host=\"gpu-a\",hw_id=\"GPU-1\\\"x\"} 312.5\n")
        );
        let h = "gen_ai_client_operation_time_to_first_chunk_seconds";
        assert!(text.contains(&format!("# TYPE {h} histogram\n")));
        assert!(text.contains(&format!(
            "{h}_bucket{{fleetbench_config_name=\"base\",le=\"0.001\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "{h}_bucket{{fleetbench_config_name=\"base\",le=\"0.02\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "{h}_bucket{{fleetbench_config_name=\"base\",le=\"0.04\"}} 3\n"
        )));
        assert!(text.contains(&format!(
            "{h}_bucket{{fleetbench_config_name=\"base\",le=\"81.92\"}} 3\n"
        )));
        assert!(text.contains(&format!(
            "{h}_bucket{{fleetbench_config_name=\"base\",le=\"+Inf\"}} 4\n"
        )));
        assert!(text.contains(&format!("{h}_count{{fleetbench_config_name=\"base\"}} 4\n")));
        let sum_line = format!("{h}_sum{{fleetbench_config_name=\"base\"}} ");
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&sum_line))
            .expect("sum line")
            .parse()
            .unwrap();
        assert!((sum - 100.0605).abs() < 1e-9, "{sum}");
        // Metrics without series are not listed.
        assert!(!text.contains("hw_energy_joules_total"));
    }

    #[test]
    fn empty_label_values_are_dropped_and_counters_ignore_bad_increments() {
        let r = Registry::default();
        let labels = || {
            vec![
                (attr::CONCURRENCY, String::new()),
                (attr::REQUEST_RATE, "2".into()),
            ]
        };
        r.add(&names::LEVELS, labels(), 1.0);
        r.add(&names::LEVELS, labels(), -5.0);
        r.add(&names::LEVELS, labels(), f64::NAN);
        assert_eq!(r.value(&names::LEVELS, labels()), Some(1.0));
        assert!(
            r.render(names::all())
                .contains("fleetbench_levels_total{fleetbench_request_rate=\"2\"} 1\n")
        );
    }
}
