//! The words of the wire enums, as people, metric labels, span attributes and JSON read them:
//! `JOB_STATE_RUNNING` is `running`, `CRASH_CLASS_PYTHON_EXCEPTION` is `python_exception`.
//!
//! One place, so that a table, a JSON field, a metric label and a log line never spell one
//! state two ways, and a new enum value gets its word without anyone writing it down. Which job
//! states are final lives here too ([`JobState::is_final`]).

use crate::agentpb::{ApiKind, CrashClass, EngineKind, EngineState, LevelOutcome, LogStream};
use crate::controllerpb::{AgentHealth, JobKind, JobState, RunState, TrialState};

/// A wire enum with a word for each value.
pub trait Word: Copy + TryFrom<i32> {
    /// What every value's protobuf name starts with (`JOB_STATE_`).
    const PREFIX: &'static str;

    /// The protobuf name (`JOB_STATE_RUNNING`).
    fn proto_name(self) -> &'static str;

    /// The value's word: its protobuf name without the prefix, in lower case (`running`).
    fn word(self) -> String {
        let name = self.proto_name();
        name.strip_prefix(Self::PREFIX)
            .unwrap_or(name)
            .to_ascii_lowercase()
    }

    /// The word of a stored or received number; a number this build does not know (a newer
    /// peer's value) reads `unknown (N)`.
    fn word_of(value: i32) -> String {
        Self::try_from(value)
            .map(Self::word)
            .unwrap_or_else(|_| format!("unknown ({value})"))
    }
}

macro_rules! words {
    ($($ty:ty => $prefix:literal),* $(,)?) => {$(
        impl Word for $ty {
            const PREFIX: &'static str = $prefix;
            fn proto_name(self) -> &'static str {
                self.as_str_name()
            }
        }
    )*};
}

words! {
    EngineState => "ENGINE_STATE_",
    CrashClass => "CRASH_CLASS_",
    LogStream => "LOG_STREAM_",
    ApiKind => "API_KIND_",
    LevelOutcome => "LEVEL_OUTCOME_",
    JobState => "JOB_STATE_",
    TrialState => "TRIAL_STATE_",
    AgentHealth => "AGENT_HEALTH_",
    RunState => "RUN_STATE_",
}

/// Engine kinds are spelt as profiles and job specs spell them: `ENGINE_KIND_SGLANG_ROUTER` is
/// `sglang-router`.
impl Word for EngineKind {
    const PREFIX: &'static str = "ENGINE_KIND_";
    fn proto_name(self) -> &'static str {
        self.as_str_name()
    }
    fn word(self) -> String {
        let name = self.proto_name();
        name.strip_prefix(Self::PREFIX)
            .unwrap_or(name)
            .to_ascii_lowercase()
            .replace('_', "-")
    }
}

/// A job submitted without a kind (an older client) is a sweep, so `unspecified` reads `sweep`.
impl Word for JobKind {
    const PREFIX: &'static str = "JOB_KIND_";
    fn proto_name(self) -> &'static str {
        match self {
            JobKind::Unspecified => JobKind::Sweep.as_str_name(),
            k => k.as_str_name(),
        }
    }
}

impl CrashClass {
    /// Whether the engine's end is the host's or someone else's doing, never the config's: it
    /// decides no verdict, and the trial runs again on another host.
    pub fn not_the_configs(self) -> bool {
        matches!(self, CrashClass::HostFault | CrashClass::KilledExternally)
    }
}

impl JobState {
    /// Whether a job in this state will never change again (succeeded, failed, cancelled).
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            JobState::Unspecified | JobState::Queued | JobState::Running
        )
    }

    /// [`JobState::is_final`] of a stored or received number; an unknown number is not final.
    pub fn is_final_value(value: i32) -> bool {
        JobState::try_from(value).is_ok_and(JobState::is_final)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_drop_the_prefix_and_read_in_lower_case() {
        assert_eq!(JobState::Running.word(), "running");
        assert_eq!(TrialState::EngineFailed.word(), "engine_failed");
        assert_eq!(CrashClass::PythonException.word(), "python_exception");
        assert_eq!(EngineKind::Llamacpp.word(), "llamacpp");
        assert_eq!(EngineKind::SglangRouter.word(), "sglang-router");
        assert_eq!(JobKind::Unspecified.word(), "sweep");
        assert_eq!(JobKind::Tune.word(), "tune");
        assert_eq!(AgentHealth::word_of(AgentHealth::Ready as i32), "ready");
        assert_eq!(RunState::word_of(99), "unknown (99)");
    }

    #[test]
    fn only_ended_jobs_are_final() {
        let finals: Vec<String> = (0..8)
            .filter(|v| JobState::is_final_value(*v))
            .map(JobState::word_of)
            .collect();
        assert_eq!(finals, ["succeeded", "failed", "cancelled"]);
    }
}
