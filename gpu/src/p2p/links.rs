//! Which NVLinks carry a pair's traffic, from what NVML says sits at the far end of each link.

/// `src`'s active NVLinks, counted by their far end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvlinkEnds {
    /// Links whose remote PCI id is the destination GPU's.
    pub to_dst: u32,
    /// Links into an NVSwitch (every peer is reached through all of them).
    pub to_switch: u32,
    /// Links to a GPU whose PCI id matches no GPU here, or whose far end NVML cannot name.
    /// Inside a VM NVML reports the host's PCI ids for the far end, so a guest sees its peer
    /// only this way (seen on the 2×H200 VM: NV18, no remote id matched).
    pub to_other_gpu: u32,
}

/// NVLinks that carry `src` → `dst` traffic. `nvlink_ok`: NVML's NVLink P2P status for the
/// pair; `nvlink_peers`: how many GPUs `src` reports NVLink P2P with (to split links whose far
/// end could not be matched).
pub fn pair_nvlinks(ends: &NvlinkEnds, nvlink_ok: bool, nvlink_peers: u32) -> u32 {
    if ends.to_dst > 0 {
        return ends.to_dst;
    }
    if !nvlink_ok {
        return 0;
    }
    if ends.to_switch > 0 {
        return ends.to_switch;
    }
    ends.to_other_gpu.checked_div(nvlink_peers).unwrap_or(0)
}

/// Nominal GB/s per direction of one link of an NVLink generation, for drivers that report the
/// version but not the speed.
pub fn nvlink_version_gbps(version: u32) -> Option<f64> {
    match version {
        1 => Some(20.0),
        2 | 3 => Some(25.0),
        // Hopper; nvidia-smi on the H200s shows 26.562 GB/s per link.
        4 => Some(26.5625),
        5 => Some(50.0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_links_win_then_switches_then_unmatched_gpu_links_are_shared() {
        let direct = NvlinkEnds {
            to_dst: 4,
            to_switch: 0,
            to_other_gpu: 8,
        };
        assert_eq!(pair_nvlinks(&direct, true, 3), 4);
        let switched = NvlinkEnds {
            to_dst: 0,
            to_switch: 18,
            to_other_gpu: 0,
        };
        assert_eq!(pair_nvlinks(&switched, true, 7), 18);
        assert_eq!(
            pair_nvlinks(&switched, false, 7),
            0,
            "NVML says no NVLink P2P for this pair"
        );
        // The 2×H200 VM: 18 links to a GPU NVML cannot match, one NVLink peer.
        let vm = NvlinkEnds {
            to_dst: 0,
            to_switch: 0,
            to_other_gpu: 18,
        };
        assert_eq!(pair_nvlinks(&vm, true, 1), 18);
        assert_eq!(pair_nvlinks(&vm, true, 3), 6);
        assert_eq!(pair_nvlinks(&vm, true, 0), 0);
        assert_eq!(pair_nvlinks(&NvlinkEnds::default(), true, 1), 0);
    }

    #[test]
    fn hopper_links_run_at_26_5625() {
        assert_eq!(nvlink_version_gbps(4), Some(26.5625));
        assert_eq!(nvlink_version_gbps(9), None);
    }
}
