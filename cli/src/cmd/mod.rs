//! One module per subcommand.

pub mod agents;
pub mod bench;
pub mod bench_sim;
pub mod bench_vllm;
pub mod certs;
pub mod compare;
pub mod diff;
pub mod jobs;
pub mod probe_p2p;
pub mod regress;
pub mod report;
pub mod run;
pub mod tune;
pub mod tune_json;
pub mod watch;
pub mod watch_json;
