//! One problem found in a job spec, located by file, line and field path.

use std::fmt;

use fleetbench_proto::controllerpb;

/// One problem in a job spec. Validation collects every problem before returning, so a user
/// fixes a file in one pass.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SpecError {
    /// The file name the caller gave (shown as is).
    pub file: String,
    /// 1-based line; 0 when the problem has no single line (e.g. a missing table).
    pub line: u32,
    /// Path of the field, e.g. `configs[1].flags."--max-running-requests"`; empty for syntax
    /// errors.
    pub field: String,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        f.write_str(": ")?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for SpecError {}

impl From<&SpecError> for controllerpb::SpecError {
    fn from(e: &SpecError) -> Self {
        controllerpb::SpecError {
            file: e.file.clone(),
            line: e.line,
            field: e.field.clone(),
            message: e.message.clone(),
        }
    }
}

impl From<&controllerpb::SpecError> for SpecError {
    fn from(e: &controllerpb::SpecError) -> Self {
        SpecError {
            file: e.file.clone(),
            line: e.line,
            field: e.field.clone(),
            message: e.message.clone(),
        }
    }
}

/// Joins errors one per line, the way the CLI prints a refused spec.
pub fn render_errors(errors: &[SpecError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
