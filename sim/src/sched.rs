//! The continuous-batching scheduler as a pure state machine, shared by the real-time engine
//! and the virtual-time predictions so that both follow exactly the same rules.
//!
//! Rules (SGLang's defaults): FCFS waiting queue; a prefill step runs whenever the queue head
//! can be admitted (prefill has priority over decode), taking requests from the head while the
//! chunk budget, `max_running_requests` and the KV reservation (`input + max_tokens`) allow; a
//! prompt longer than the remaining budget is prefilled in chunks over several steps; a
//! request's first token comes out of the step that finishes its prefill; otherwise a decode
//! step gives every running request one token.

use std::collections::VecDeque;

use crate::model::ModelParams;

/// Identifies a request inside one scheduler.
pub type ReqId = u64;

#[derive(Debug, Clone)]
struct Waiting {
    id: ReqId,
    input: u32,
    output: u32,
    prefilled: u32,
}

#[derive(Debug, Clone)]
struct Running {
    id: ReqId,
    input: u32,
    output: u32,
    generated: u32,
}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Prefill of `reqs` requests (some possibly partial) with `tokens` prompt tokens.
    Prefill { reqs: u32, tokens: u32 },
    /// One token for each of `batch` running requests.
    Decode { batch: u32 },
}

/// One token delivered at the end of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emit {
    pub id: ReqId,
    /// Tokens generated so far by this request, this one included.
    pub count: u32,
    /// This was its last token.
    pub finished: bool,
}

/// A planned step: its kind, its engine time (ms, before time-scale and jitter) and its tokens.
#[derive(Debug, Clone)]
pub struct Step {
    pub kind: StepKind,
    pub ms: f64,
    pub emits: Vec<Emit>,
}

/// Why a request was refused at submission.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    /// It can never fit in the KV pool or the context.
    #[error(
        "Requested token count exceeds the model's maximum context length of {limit} tokens. You requested a total of {requested} tokens"
    )]
    TooLong { requested: u64, limit: u64 },
}

/// Scheduler state.
#[derive(Debug, Clone)]
pub struct Scheduler {
    params: ModelParams,
    waiting: VecDeque<Waiting>,
    running: Vec<Running>,
    kv_reserved: u64,
}

impl Scheduler {
    /// An idle scheduler.
    pub fn new(params: ModelParams) -> Self {
        Scheduler {
            params,
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv_reserved: 0,
        }
    }

    /// The model parameters.
    pub fn params(&self) -> &ModelParams {
        &self.params
    }

    /// Queues a request of `input` prompt tokens and `output` tokens to generate (>= 1).
    pub fn submit(&mut self, id: ReqId, input: u32, output: u32) -> Result<(), SubmitError> {
        let need = u64::from(input) + u64::from(output);
        let limit = u64::from(self.params.context_len).min(self.params.max_total_num_tokens);
        if need > limit {
            return Err(SubmitError::TooLong {
                requested: need,
                limit,
            });
        }
        self.waiting.push_back(Waiting {
            id,
            input,
            output: output.max(1),
            prefilled: 0,
        });
        Ok(())
    }

    /// Drops a request wherever it is (client went away).
    pub fn abort(&mut self, id: ReqId) {
        if let Some(i) = self.waiting.iter().position(|w| w.id == id) {
            let w = self.waiting.remove(i).expect("index from position");
            if w.prefilled > 0 {
                self.kv_reserved -= u64::from(w.input) + u64::from(w.output);
            }
        } else if let Some(i) = self.running.iter().position(|r| r.id == id) {
            let r = self.running.swap_remove(i);
            self.kv_reserved -= u64::from(r.input) + u64::from(r.output);
        }
    }

    /// Requests waiting for prefill (partially prefilled ones included).
    pub fn queued(&self) -> usize {
        self.waiting.len()
    }

    /// Requests decoding.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// KV tokens holding data now (prompts and generated tokens).
    pub fn kv_used(&self) -> u64 {
        let r: u64 = self
            .running
            .iter()
            .map(|r| u64::from(r.input + r.generated))
            .sum();
        let w: u64 = self.waiting.iter().map(|w| u64::from(w.prefilled)).sum();
        r + w
    }

    /// Whether there is any work.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Plans and applies the next step; `None` when idle or nothing can run.
    pub fn next_step(&mut self) -> Option<Step> {
        if let Some(step) = self.try_prefill() {
            return Some(step);
        }
        if self.running.is_empty() {
            return None;
        }
        let batch = self.running.len() as u32;
        let ms = self.params.step_ms(batch, 0);
        let mut emits = Vec::with_capacity(self.running.len());
        let mut freed = 0u64;
        self.running.retain_mut(|r| {
            r.generated += 1;
            let finished = r.generated >= r.output;
            emits.push(Emit {
                id: r.id,
                count: r.generated,
                finished,
            });
            if finished {
                freed += u64::from(r.input) + u64::from(r.output);
            }
            !finished
        });
        self.kv_reserved -= freed;
        Some(Step {
            kind: StepKind::Decode { batch },
            ms,
            emits,
        })
    }

    fn try_prefill(&mut self) -> Option<Step> {
        let cap = self.params.max_total_num_tokens;
        let mrr = self.params.max_running_requests as usize;
        let mut budget = self.params.chunked_prefill_size;
        let mut tokens = 0u32;
        let mut reqs = 0u32;
        let mut emits = Vec::new();
        let mut admitted = self.running.len();
        while budget > 0 {
            let Some(head) = self.waiting.front_mut() else {
                break;
            };
            if head.prefilled == 0 {
                let need = u64::from(head.input) + u64::from(head.output);
                if admitted >= mrr || self.kv_reserved + need > cap {
                    break;
                }
                self.kv_reserved += need;
            }
            admitted += 1;
            let left = head.input - head.prefilled;
            let take = left.min(budget);
            head.prefilled += take;
            budget -= take;
            tokens += take;
            reqs += 1;
            if head.prefilled < head.input {
                // Chunked: the rest goes into the next prefill step.
                break;
            }
            let w = self.waiting.pop_front().expect("head exists");
            let finished = w.output <= 1;
            emits.push(Emit {
                id: w.id,
                count: 1,
                finished,
            });
            if finished {
                self.kv_reserved -= u64::from(w.input) + u64::from(w.output);
            } else {
                self.running.push(Running {
                    id: w.id,
                    input: w.input,
                    output: w.output,
                    generated: 1,
                });
            }
        }
        if reqs == 0 {
            return None;
        }
        // A zero-token prompt still costs a prefill step (SGLang pads to one token).
        let ms = self.params.step_ms(0, tokens.max(1));
        Some(Step {
            kind: StepKind::Prefill { reqs, tokens },
            ms,
            emits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse_args;

    fn sched(flags: &str) -> Scheduler {
        let v: Vec<String> = flags.split_whitespace().map(String::from).collect();
        Scheduler::new(ModelParams::from_args(&parse_args(&v).unwrap()).unwrap())
    }

    #[test]
    fn prefill_then_decode_to_completion() {
        let mut s = sched("");
        s.submit(1, 10, 3).unwrap();
        let st = s.next_step().unwrap();
        assert_eq!(
            st.kind,
            StepKind::Prefill {
                reqs: 1,
                tokens: 10
            }
        );
        assert_eq!(
            st.emits,
            vec![Emit {
                id: 1,
                count: 1,
                finished: false
            }]
        );
        let st = s.next_step().unwrap();
        assert_eq!(st.kind, StepKind::Decode { batch: 1 });
        let st = s.next_step().unwrap();
        assert_eq!(
            st.emits,
            vec![Emit {
                id: 1,
                count: 3,
                finished: true
            }]
        );
        assert!(s.next_step().is_none());
        assert!(s.is_idle());
        assert_eq!(s.kv_used(), 0);
    }

    #[test]
    fn max_running_requests_caps_batch() {
        let mut s = sched("--max-running-requests 4");
        for i in 0..10 {
            s.submit(i, 8, 5).unwrap();
        }
        let st = s.next_step().unwrap();
        assert_eq!(
            st.kind,
            StepKind::Prefill {
                reqs: 4,
                tokens: 32
            }
        );
        let st = s.next_step().unwrap();
        assert_eq!(st.kind, StepKind::Decode { batch: 4 });
        assert_eq!(s.queued(), 6);
    }

    #[test]
    fn long_prompt_is_chunked() {
        let mut s = sched("--chunked-prefill-size 100");
        s.submit(1, 250, 2).unwrap();
        let kinds: Vec<StepKind> = (0..3).map(|_| s.next_step().unwrap().kind).collect();
        assert_eq!(
            kinds,
            vec![
                StepKind::Prefill {
                    reqs: 1,
                    tokens: 100
                },
                StepKind::Prefill {
                    reqs: 1,
                    tokens: 100
                },
                StepKind::Prefill {
                    reqs: 1,
                    tokens: 50
                },
            ]
        );
        assert_eq!(s.running(), 1);
    }

    #[test]
    fn kv_capacity_limits_admission_and_rejects_impossible() {
        let mut s = sched("--mem-fraction-static 0.45 --context-length 100000");
        let cap = s.params().max_total_num_tokens;
        let per = (cap / 3) as u32;
        for i in 0..4 {
            s.submit(i, per - 10, 10).unwrap();
        }
        s.next_step().unwrap();
        s.next_step().unwrap();
        s.next_step().unwrap();
        assert_eq!(s.running(), 3);
        assert_eq!(s.queued(), 1);
        assert!(matches!(
            s.submit(9, cap as u32, 10),
            Err(SubmitError::TooLong { .. })
        ));
    }

    #[test]
    fn abort_frees_reservation() {
        let mut s = sched("");
        s.submit(1, 10, 100).unwrap();
        s.next_step().unwrap();
        s.abort(1);
        assert!(s.is_idle());
        assert!(s.next_step().is_none());
    }
}
