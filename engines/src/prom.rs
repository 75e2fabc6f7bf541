//! A reader for the Prometheus text exposition format (0.0.4, and the OpenMetrics text that
//! `prometheus_client` may serve): `# HELP`/`# TYPE` lines, samples with labels (escapes
//! `\\`, `\"`, `\n`), values including `NaN` and `±Inf`, optional timestamps.
//!
//! It is lenient: a malformed line is reported in [`Exposition::errors`] and the rest is kept,
//! because one odd series must not hide an engine's other metrics.

use std::collections::BTreeMap;

/// A metric family's declared type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

/// One sample.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Series {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A malformed line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct PromError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub reason: String,
}

/// Everything read from one exposition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub series: Vec<Series>,
    /// Declared family types by family name (`# TYPE name counter`).
    pub types: BTreeMap<String, MetricType>,
    pub errors: Vec<PromError>,
}

impl Exposition {
    /// The declared type of a sample's family: its own name, or the name without a
    /// `_total`/`_bucket`/`_sum`/`_count`/`_created` suffix.
    pub fn type_of(&self, sample_name: &str) -> MetricType {
        if let Some(t) = self.types.get(sample_name) {
            return *t;
        }
        for suffix in ["_total", "_bucket", "_sum", "_count", "_created"] {
            if let Some(base) = sample_name.strip_suffix(suffix)
                && let Some(t) = self.types.get(base)
            {
                return *t;
            }
        }
        MetricType::Untyped
    }
}

/// Reads an exposition.
pub fn parse(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            if words.next() == Some("TYPE")
                && let (Some(name), Some(ty)) = (words.next(), words.next())
            {
                let ty = match ty {
                    "counter" => MetricType::Counter,
                    "gauge" => MetricType::Gauge,
                    "histogram" | "gaugehistogram" => MetricType::Histogram,
                    "summary" => MetricType::Summary,
                    _ => MetricType::Untyped,
                };
                out.types.insert(name.to_string(), ty);
            }
            continue;
        }
        match parse_sample(line) {
            Ok(s) => out.series.push(s),
            Err(reason) => out.errors.push(PromError {
                line: i + 1,
                reason,
            }),
        }
    }
    out
}

fn parse_sample(line: &str) -> Result<Series, String> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("bad metric name in {line:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let mut fields = rest.split_whitespace();
    let value = fields
        .next()
        .ok_or_else(|| format!("no value for {name}"))?;
    let value = parse_value(value).ok_or_else(|| format!("bad value {value:?} for {name}"))?;
    // An optional timestamp may follow; anything beyond that is an error.
    if let Some(ts) = fields.next()
        && parse_value(ts).is_none()
    {
        return Err(format!("bad timestamp {ts:?} for {name}"));
    }
    if fields.next().is_some() {
        return Err(format!("trailing text after {name}"));
    }
    Ok(Series {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Reads `k="v",...}` and returns the text after the closing brace.
fn parse_labels<'a>(
    mut s: &'a str,
    labels: &mut BTreeMap<String, String>,
) -> Result<&'a str, String> {
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Ok(after);
        }
        let eq = s.find('=').ok_or("label without '='")?;
        let key = s[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad label name {key:?}"));
        }
        s = s[eq + 1..].trim_start();
        s = s.strip_prefix('"').ok_or("label value must be quoted")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".to_string()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated escape".to_string()),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.insert(key.to_string(), value);
        s = s[end + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err("expected ',' or '}' after a label".to_string());
        }
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" | "nan" => Some(f64::NAN),
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_labels_escapes_and_special_values() {
        let e = parse(
            "# HELP x_total A counter\n# TYPE x_total counter\nx_total 3\n\
             # TYPE lat histogram\n\
             lat_bucket{le=\"0.5\",model=\"a\\\"b\\\\c\\nd\"} 1\n\
             lat_bucket{le=\"+Inf\",model=\"m\"} 2 1700000000000\n\
             lat_sum{model=\"m\",} 1.5e-1\nlat_count 2\n\
             g NaN\nh -Inf\n",
        );
        assert!(e.errors.is_empty(), "{:?}", e.errors);
        assert_eq!(e.series.len(), 7);
        assert_eq!(e.series[0].value, 3.0);
        assert_eq!(e.type_of("x_total"), MetricType::Counter);
        assert_eq!(e.type_of("lat_bucket"), MetricType::Histogram);
        assert_eq!(e.series[1].labels["model"], "a\"b\\c\nd");
        assert_eq!(e.series[2].labels["le"], "+Inf");
        assert_eq!(e.series[3].value, 0.15);
        assert!(e.series[5].value.is_nan());
        assert_eq!(e.series[6].value, f64::NEG_INFINITY);
    }

    #[test]
    fn bad_lines_are_reported_and_skipped() {
        let e = parse("ok 1\nbad{x=1} 2\nnovalue\n9bad 1\nok2 2 3 4\nlast 5\n");
        let names: Vec<_> = e.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ok", "last"]);
        let lines: Vec<_> = e.errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [2, 3, 4, 5]);
    }
}
