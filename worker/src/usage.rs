//! Token usage of model turns, its estimated cost, and the budgets it is held to.
//!
//! Every provider reports its answer's tokens as a [`Usage`] (input not read from the
//! prompt cache, output, cache reads, cache writes). The agent adds up one attempt's
//! turns and sends the running total on every heartbeat, so a lost heartbeat loses
//! nothing: the server keeps the attempt's latest total and adds the difference to the
//! step's and the run's. A [`ModelPrice`] from the worker's configuration turns tokens
//! into an estimated cost in US dollars.

use railyard_proto::v1;
use serde::{Deserialize, Serialize};

/// Tokens of one turn, or of several added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens not read from the prompt cache.
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Usage {
    /// Every token, as budgets count them: input, output, cache reads and writes.
    pub fn total(&self) -> u64 {
        self.input
            .saturating_add(self.output)
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    /// Adds `other` (saturating: a provider's numbers cannot overflow the sum).
    pub(crate) fn add(&mut self, other: &Usage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
    }

    /// On the wire, with its estimated cost.
    pub fn to_proto(self, cost_usd: f64) -> v1::TokenUsage {
        v1::TokenUsage {
            input_tokens: self.input,
            output_tokens: self.output,
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
            cost_usd,
        }
    }

    /// From the wire (the cost is kept apart).
    fn from_proto(u: &v1::TokenUsage) -> Self {
        Self {
            input: u.input_tokens,
            output: u.output_tokens,
            cache_read: u.cache_read_tokens,
            cache_write: u.cache_write_tokens,
        }
    }
}

/// A model's price, in US dollars per million tokens. Cache prices default to the
/// input price when not given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input: f64,
    pub output: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

/// The highest price accepted, per million tokens: anything above is a typo.
const MAX_PRICE_PER_MILLION: f64 = 100_000.0;

impl ModelPrice {
    /// The estimated cost of `usage`, in US dollars.
    pub(crate) fn cost(&self, usage: &Usage) -> f64 {
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(usage.input, self.input)
            + per(usage.output, self.output)
            + per(usage.cache_read, self.cache_read.unwrap_or(self.input))
            + per(usage.cache_write, self.cache_write.unwrap_or(self.input))
    }

    /// Checks every price is a number between 0 and [`MAX_PRICE_PER_MILLION`]; the
    /// error names the bad one.
    pub(crate) fn check(&self) -> Result<(), String> {
        let prices = [
            ("input", Some(self.input)),
            ("output", Some(self.output)),
            ("cache_read", self.cache_read),
            ("cache_write", self.cache_write),
        ];
        for (name, price) in prices {
            if let Some(p) = price
                && !(0.0..=MAX_PRICE_PER_MILLION).contains(&p)
            {
                return Err(format!(
                    "{name}: must be between 0 and {MAX_PRICE_PER_MILLION} US dollars per million tokens, got {p}"
                ));
            }
        }
        Ok(())
    }
}

/// A step's and run's budget as the server handed it out, with what was used before
/// this attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Budget {
    /// 0: none.
    pub step_max_tokens: u64,
    /// 0: none.
    pub run_max_tokens: u64,
    /// 0: none.
    pub run_max_cost_usd: f64,
    pub step_used_tokens: u64,
    pub run_used_tokens: u64,
    pub run_used_cost_usd: f64,
}

impl Budget {
    /// The budget a step task carries.
    pub(crate) fn from_task(task: &v1::StepTask) -> Self {
        let Some(b) = &task.budget else {
            return Self::default();
        };
        let tokens = |u: &Option<v1::TokenUsage>| u.as_ref().map_or(0, |u| Usage::from_proto(u).total());
        Self {
            step_max_tokens: b.step_max_tokens,
            run_max_tokens: b.run_max_tokens,
            run_max_cost_usd: if b.run_max_cost_usd.is_finite() {
                b.run_max_cost_usd.max(0.0)
            } else {
                0.0
            },
            step_used_tokens: tokens(&b.step_used),
            run_used_tokens: tokens(&b.run_used),
            run_used_cost_usd: b.run_used.as_ref().map_or(0.0, |u| u.cost_usd),
        }
    }

    /// Whether an attempt that has used `usage` (costing `cost_usd`) is past a limit:
    /// the message says which, `None` while within all of them.
    pub(crate) fn exceeded(&self, usage: &Usage, cost_usd: f64) -> Option<String> {
        let tokens = usage.total();
        let step = self.step_used_tokens.saturating_add(tokens);
        if self.step_max_tokens > 0 && step > self.step_max_tokens {
            return Some(format!(
                "the step used {step} tokens, more than its maxTokens of {}",
                self.step_max_tokens
            ));
        }
        let run = self.run_used_tokens.saturating_add(tokens);
        if self.run_max_tokens > 0 && run > self.run_max_tokens {
            return Some(format!(
                "the run used {run} tokens, more than its maxTokens of {}",
                self.run_max_tokens
            ));
        }
        let cost = self.run_used_cost_usd + cost_usd;
        if self.run_max_cost_usd > 0.0 && cost > self.run_max_cost_usd {
            return Some(format!(
                "the run cost an estimated ${cost:.4}, more than its maxCostUsd of ${}",
                self.run_max_cost_usd
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_and_saturate() {
        let mut u = Usage {
            input: 10,
            output: 5,
            cache_read: 100,
            cache_write: 20,
        };
        assert_eq!(u.total(), 135);
        u.add(&Usage {
            input: 1,
            output: 1,
            cache_read: 1,
            cache_write: 1,
        });
        assert_eq!(u.total(), 139);
        u.add(&Usage {
            input: u64::MAX,
            ..Default::default()
        });
        assert_eq!(u.input, u64::MAX);
        assert_eq!(u.total(), u64::MAX);
    }

    #[test]
    fn cost_per_million_with_cache_defaults() {
        let price = ModelPrice {
            input: 3.0,
            output: 15.0,
            cache_read: Some(0.3),
            cache_write: None,
        };
        let u = Usage {
            input: 1_000_000,
            output: 100_000,
            cache_read: 2_000_000,
            cache_write: 1_000_000,
        };
        // 3 + 1.5 + 0.6 + 3 (cache writes at the input price)
        assert!((price.cost(&u) - 8.1).abs() < 1e-9, "{}", price.cost(&u));
        assert!(price.check().is_ok());
        let bad = ModelPrice {
            output: -1.0,
            ..price
        };
        assert!(bad.check().unwrap_err().starts_with("output:"));
        let nan = ModelPrice {
            input: f64::NAN,
            ..price
        };
        assert!(nan.check().unwrap_err().starts_with("input:"));
    }

    #[test]
    fn budgets_count_earlier_attempts_and_the_run() {
        let b = Budget {
            step_max_tokens: 100,
            step_used_tokens: 60,
            ..Default::default()
        };
        let u = |n| Usage {
            input: n,
            ..Default::default()
        };
        assert_eq!(b.exceeded(&u(40), 0.0), None);
        assert!(b.exceeded(&u(41), 0.0).unwrap().contains("step used 101 tokens"));
        let run = Budget {
            run_max_tokens: 1000,
            run_used_tokens: 999,
            run_max_cost_usd: 1.0,
            run_used_cost_usd: 0.5,
            ..Default::default()
        };
        assert!(run.exceeded(&u(2), 0.0).unwrap().contains("run used 1001"));
        assert!(run.exceeded(&u(1), 0.6).unwrap().contains("maxCostUsd"));
        assert_eq!(run.exceeded(&u(1), 0.4), None);
        assert_eq!(Budget::default().exceeded(&u(u64::MAX), 1e9), None);
    }
}
