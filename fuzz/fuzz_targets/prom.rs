//! The Prometheus text parser and the mapping of each engine's `/metrics` to common names: any
//! text parses (what it cannot read is skipped), never a panic, and no more series than lines.
#![no_main]

use fleetbench_engines::EngineKind;
use libfuzzer_sys::fuzz_target;

const KINDS: &[EngineKind] = &EngineKind::ALL;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let e = fleetbench_engines::prom::parse(&text);
    assert!(
        e.series.len() <= text.lines().count(),
        "{} series from {} lines",
        e.series.len(),
        text.lines().count()
    );
    for &kind in KINDS {
        let _ = fleetbench_engines::map_metrics(kind, &text);
    }
});
