//! Faults that fail single requests, where the engine keeps running: a share of requests
//! answered at once with HTTP 500 (`--fail-rate`), and prompts above a length rejected with
//! HTTP 400 (`--max-prompt-len`), as a config with a shorter context would. Both cost the
//! engine nothing, so a closed loop resends at once: exactly what a measurement that counts
//! only completed requests cannot see.

use crate::args::SimArgs;

/// Why a request is refused: the HTTP status and the message.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether request number `req_no` with a `prompt`-token prompt is refused; `seed` makes the
/// draw of failing requests differ between processes.
pub fn check(args: &SimArgs, seed: u64, req_no: u64, prompt: u32) -> Option<Refusal> {
    if let Some(max) = args.max_prompt_len
        && prompt > max
    {
        return Some(Refusal {
            status: 400,
            message: format!(
                "This model's maximum context length is {max} tokens. However, you requested \
                 {prompt} tokens in the messages. Please reduce the length of the messages."
            ),
        });
    }
    if args.fail_rate > 0.0 {
        let u = (mix(seed ^ mix(req_no)) >> 11) as f64 / (1u64 << 53) as f64;
        if u < args.fail_rate {
            return Some(Refusal {
                status: 500,
                message: "Internal server error (simulated: --fail-rate)".into(),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fail_rate_fails_that_share_and_long_prompts_are_rejected() {
        let args = SimArgs {
            fail_rate: 0.2,
            max_prompt_len: Some(100),
            ..SimArgs::default()
        };
        let failed = (0..10_000)
            .filter(|n| check(&args, 7, *n, 10).is_some_and(|r| r.status == 500))
            .count();
        assert!((1_850..=2_150).contains(&failed), "{failed} of 10,000");
        let r = check(&args, 7, 1, 101).unwrap();
        assert_eq!(r.status, 400);
        assert!(r.message.contains("maximum context length is 100"));
        assert!(check(&SimArgs::default(), 7, 1, 100_000).is_none());
    }
}
