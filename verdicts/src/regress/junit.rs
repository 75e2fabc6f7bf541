//! JUnit XML of a suite run: one test suite, one test case per check, a failure per
//! regression, so that CI systems show which metric at which level got worse. Each case's
//! output carries the test (interval, p-values) and the change points of the check's history.

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::verdict::{Status, Verdict};

/// The JUnit XML document of a suite run.
pub fn junit_xml(
    suite_name: &str,
    verdicts: &[Verdict],
) -> Result<String, quick_junit::SerializeError> {
    let mut report = Report::new(format!("fleetbench regress {suite_name}"));
    let mut suite = TestSuite::new(suite_name.to_string());
    for v in verdicts {
        let status = match v.status {
            Status::Regressed => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(format!("{} regressed: {}", v.metric.name(), v.detail));
                s.set_type("regression");
                s
            }
            Status::Pass | Status::NoBaseline | Status::Forming => TestCaseStatus::success(),
        };
        let mut case = TestCase::new(format!("{} {}", v.key(), v.metric.name()), status);
        case.set_classname(format!("{suite_name}.{}", v.config));
        let points: Vec<String> = v
            .trend
            .change_points
            .iter()
            .map(super::trend::describe)
            .collect();
        let points = if points.is_empty() {
            format!("change points: none in {} stored run(s)", v.trend.runs)
        } else {
            format!("change points: {}", points.join("; "))
        };
        case.set_system_out(format!(
            "baseline: {:?}\ncurrent: {:?}\n{}\n{points}",
            v.baseline, v.current, v.detail
        ));
        suite.add_test_case(case);
    }
    report.add_test_suite(suite);
    report.to_string()
}
