//! The crash classifier and the engines' log parsers: any log tail and any exit status give a
//! class and facts, never a panic. The first bytes pick the engine kind and the exit status;
//! the rest is the log, one line per `\n`.
#![no_main]

use fleetbench_engines::{EngineKind, ExitInfo};
use libfuzzer_sys::fuzz_target;

const KINDS: &[EngineKind] = &EngineKind::ALL;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (head, log) = data.split_at(3);
    let kind = KINDS[usize::from(head[0]) % KINDS.len()];
    let flags = head[1];
    let exit = ExitInfo {
        code: (flags & 1 != 0).then(|| i32::from(head[2] as i8)),
        signal: (flags & 2 != 0).then(|| i32::from(head[2] & 0x3f)),
        startup_timed_out: flags & 4 != 0,
        unhealthy: flags & 8 != 0,
        port_in_use_before_start: flags & 16 != 0,
    };
    let text = String::from_utf8_lossy(log);
    let lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    let _ = fleetbench_engines::classify(kind, &exit, &lines);
    let _ = fleetbench_engines::logs::parse_all(kind, lines.iter().map(String::as_str));
});
