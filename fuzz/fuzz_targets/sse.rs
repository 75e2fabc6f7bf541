//! The load generator's SSE scanner: any bytes, cut anywhere, give the same events as the
//! stream fed whole, and the buffer kept for a split line stays under its cap.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fleetbench_loadgen::fuzzing::sse(data));
