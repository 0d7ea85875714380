//! Token usage: what each step attempt's model turns used, as the worker reports it
//! on its heartbeats (a running total per attempt), and the budgets it is held to.
//!
//! The worker sends the attempt's cumulative usage, so a lost heartbeat loses nothing:
//! the run keeps the attempt's latest total ([`StepRecord::attempt_usage`](super::StepRecord))
//! and adds only the difference to the step's and the run's totals. The work per
//! heartbeat is a few additions, whatever the size of the run.

/// Tokens, and their estimated cost in US dollars (the worker's price table). Its
/// `Serialize` is the API's view of it, in a `StepUsage` event.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Usage {
    /// Input tokens not read from the prompt cache.
    #[serde(rename = "inputTokens")]
    pub input: u64,
    /// Output tokens.
    #[serde(rename = "outputTokens")]
    pub output: u64,
    /// Input tokens read from the prompt cache.
    #[serde(rename = "cacheReadTokens")]
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    #[serde(rename = "cacheWriteTokens")]
    pub cache_write: u64,
    /// The estimated cost, in US dollars (0: no price known).
    #[serde(rename = "costUsd")]
    pub cost_usd: f64,
}

impl Usage {
    /// Every token, as budgets count them.
    pub fn total(&self) -> u64 {
        self.input
            .saturating_add(self.output)
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    /// Whether nothing was used.
    pub fn is_zero(&self) -> bool {
        self.total() == 0 && self.cost_usd == 0.0
    }

    /// Adds `other`, saturating.
    pub fn add(&mut self, other: &Usage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.cost_usd += other.cost_usd;
    }

    /// What `self` (a newer running total) adds to `earlier`: each count's growth,
    /// never negative (a total that went down, from a reordered or bad report, adds
    /// nothing).
    pub fn growth_since(&self, earlier: &Usage) -> Usage {
        Usage {
            input: self.input.saturating_sub(earlier.input),
            output: self.output.saturating_sub(earlier.output),
            cache_read: self.cache_read.saturating_sub(earlier.cache_read),
            cache_write: self.cache_write.saturating_sub(earlier.cache_write),
            cost_usd: (self.cost_usd - earlier.cost_usd).max(0.0),
        }
    }

    /// The larger of each count: the running total after a report, however reports
    /// are ordered.
    pub fn max(&self, other: &Usage) -> Usage {
        Usage {
            input: self.input.max(other.input),
            output: self.output.max(other.output),
            cache_read: self.cache_read.max(other.cache_read),
            cache_write: self.cache_write.max(other.cache_write),
            cost_usd: self.cost_usd.max(other.cost_usd),
        }
    }
}

/// A run's budget (none: unlimited): from its StartRun, else its definition.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunBudget {
    /// Most tokens the run may use, all kinds counted.
    pub max_tokens: Option<u64>,
    /// Most estimated cost the run may reach, in US dollars.
    pub max_cost_usd: Option<f64>,
}

/// Error type of a step the server failed for its token budget (non-retryable).
pub const TOKEN_BUDGET_EXCEEDED: &str = "token_budget_exceeded";

/// Why `step` (of a step with `step_max` tokens) or `run` is past its budget, if it is.
pub fn budget_exceeded(
    step_max: Option<u64>,
    step: &Usage,
    budget: &RunBudget,
    run: &Usage,
) -> Option<String> {
    if let Some(max) = step_max
        && step.total() > max
    {
        return Some(format!(
            "the step used {} tokens, more than its maxTokens of {max}",
            step.total()
        ));
    }
    if let Some(max) = budget.max_tokens
        && run.total() > max
    {
        return Some(format!(
            "the run used {} tokens, more than its maxTokens of {max}",
            run.total()
        ));
    }
    if let Some(max) = budget.max_cost_usd
        && run.cost_usd > max
    {
        return Some(format!(
            "the run cost an estimated ${:.4}, more than its maxCostUsd of ${max}",
            run.cost_usd
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(input: u64, cost_usd: f64) -> Usage {
        Usage {
            input,
            cost_usd,
            ..Default::default()
        }
    }

    #[test]
    fn growth_is_never_negative() {
        let earlier = Usage {
            input: 10,
            output: 5,
            cache_read: 7,
            cache_write: 1,
            cost_usd: 0.5,
        };
        let later = Usage {
            input: 15,
            output: 4,
            cache_read: 7,
            cache_write: 3,
            cost_usd: 0.4,
        };
        let g = later.growth_since(&earlier);
        assert_eq!(
            (g.input, g.output, g.cache_read, g.cache_write, g.cost_usd),
            (5, 0, 0, 2, 0.0)
        );
        let m = later.max(&earlier);
        assert_eq!((m.input, m.output, m.cost_usd), (15, 5, 0.5));
        let mut sum = earlier;
        sum.add(&g);
        assert_eq!(sum.total(), 30);
    }

    #[test]
    fn budgets_name_what_was_passed() {
        let none = RunBudget::default();
        assert_eq!(
            budget_exceeded(None, &u(u64::MAX, 1e9), &none, &u(u64::MAX, 1e9)),
            None
        );
        assert_eq!(
            budget_exceeded(Some(100), &u(100, 0.0), &none, &u(100, 0.0)),
            None
        );
        let step = budget_exceeded(Some(100), &u(101, 0.0), &none, &u(101, 0.0)).unwrap();
        assert!(
            step.contains("step used 101") && step.contains("maxTokens of 100"),
            "{step}"
        );
        let run = RunBudget {
            max_tokens: Some(1000),
            max_cost_usd: Some(2.0),
        };
        assert!(
            budget_exceeded(None, &u(1, 0.0), &run, &u(1001, 0.0))
                .unwrap()
                .contains("run used 1001")
        );
        assert!(
            budget_exceeded(None, &u(1, 0.0), &run, &u(10, 2.5))
                .unwrap()
                .contains("maxCostUsd of $2")
        );
    }
}
