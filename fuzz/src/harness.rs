//! The engine: proptest's runner driven for a budget of cases or of time, in
//! batches of fresh seeds, with a watchdog that stops the process when one case
//! hangs. Any panic or failed property is a finding; proptest shrinks it to a
//! small input before it is reported.

use std::fmt::Debug;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

/// How long a target runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// This many generated cases (the corpus seeds come on top).
    Cases(u64),
    /// Until this much time has passed (at least one batch).
    Time(Duration),
}

impl Budget {
    /// The budget from the environment: `RAILYARD_FUZZ_SECONDS` (per target) if set,
    /// else `default`.
    pub fn from_env(default: Budget) -> Budget {
        match std::env::var("RAILYARD_FUZZ_SECONDS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
        {
            Some(secs) if secs > 0.0 => Budget::Time(Duration::from_secs_f64(secs)),
            _ => default,
        }
    }
}

/// What one target's run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: &'static str,
    /// Inputs the target was called with (generated, mutated and shrinking).
    pub executions: u64,
    pub elapsed: Duration,
    /// The slowest single execution.
    pub slowest: Duration,
    /// The seed of the first batch; batch `i` uses `seed + i`.
    pub seed: u64,
    /// Each failure: the reason and the shrunk input.
    pub findings: Vec<String>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        write!(
            f,
            "fuzz {:<10} {:>8} executions in {:>6.1} s ({:>7.0}/s), slowest {:>6.1} ms, seed {}, findings: {}",
            self.target,
            self.executions,
            secs,
            self.executions as f64 / secs.max(1e-9),
            self.slowest.as_secs_f64() * 1000.0,
            self.seed,
            self.findings.len()
        )?;
        for finding in &self.findings {
            write!(f, "\n  FINDING {}: {finding}", self.target)?;
        }
        Ok(())
    }
}

/// Cases per proptest batch; each batch gets its own seed.
const BATCH: u32 = 32;
/// Longest finding text kept (inputs can be megabytes).
const MAX_FINDING: usize = 4000;

/// One case that runs longer than this is a hang: the watchdog prints the target
/// and seed and aborts the process. `RAILYARD_FUZZ_HANG_SECONDS` overrides it; the
/// default is generous because CI machines are slow and shared.
fn hang_limit() -> Duration {
    let secs = std::env::var("RAILYARD_FUZZ_HANG_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

/// The seed: `RAILYARD_FUZZ_SEED` to replay a run, else a random one.
fn seed() -> u64 {
    if let Some(seed) = std::env::var("RAILYARD_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return seed;
    }
    // std's hasher keys are random per process: a fresh seed without reading the
    // clock. The seed is printed, so a finding can be replayed.
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// Runs `test` on inputs of `strategy` for `budget`, then reports. A finding stops
/// the target (proptest has shrunk it already); the other targets still run.
pub fn run<S>(
    target: &'static str,
    strategy: S,
    budget: Budget,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Report
where
    S: Strategy,
    S::Value: Debug,
{
    let seed = seed();
    let started = Instant::now();
    let executions = AtomicU64::new(0);
    let slowest = Mutex::new(Duration::ZERO);
    // Milliseconds since `started` at which the running case began; 0 when none runs.
    let case_began = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let limit = hang_limit();
    let mut findings = Vec::new();

    // Shrinking re-runs a panicking input hundreds of times: say where the first
    // panic was, once, instead of a backtrace each time.
    let told = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let told_hook = told.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !told_hook.swap(true, Relaxed) {
            eprintln!("{target}: {info} (reported once; the finding below has the shrunk input)");
        }
    }));

    std::thread::scope(|scope| {
        scope.spawn(|| {
            while done.load(Relaxed) == 0 {
                std::thread::sleep(Duration::from_millis(200));
                let began = case_began.load(Relaxed);
                if began == 0 {
                    continue;
                }
                let now = started.elapsed().as_millis() as u64;
                if now.saturating_sub(began) > limit.as_millis() as u64 {
                    eprintln!(
                        "FINDING {target}: one case has run for more than {} s (a hang); \
                         replay with RAILYARD_FUZZ_SEED={seed} after {} executions",
                        limit.as_secs(),
                        executions.load(Relaxed)
                    );
                    std::process::abort();
                }
            }
        });

        let mut batch: u64 = 0;
        loop {
            let cases = match budget {
                Budget::Cases(n) => {
                    let left = n.saturating_sub(batch * u64::from(BATCH));
                    if left == 0 {
                        break;
                    }
                    left.min(u64::from(BATCH)) as u32
                }
                Budget::Time(d) => {
                    if batch > 0 && started.elapsed() >= d {
                        break;
                    }
                    BATCH
                }
            };
            let config = Config {
                cases,
                failure_persistence: None,
                rng_seed: RngSeed::Fixed(seed.wrapping_add(batch)),
                max_shrink_time: 30_000,
                max_shrink_iters: 4096,
                ..Config::default()
            };
            let mut runner = TestRunner::new(config);
            let result = runner.run(&strategy, |input| {
                executions.fetch_add(1, Relaxed);
                let t = Instant::now();
                case_began.store(started.elapsed().as_millis().max(1) as u64, Relaxed);
                let r = test(input);
                case_began.store(0, Relaxed);
                let took = t.elapsed();
                let mut s = slowest.lock().unwrap_or_else(|p| p.into_inner());
                *s = (*s).max(took);
                r
            });
            batch += 1;
            match result {
                Ok(()) => {}
                Err(TestError::Fail(reason, input)) => {
                    let text = railyard_model::text::cut(
                        &format!("{reason}; input (shrunk): {input:?}"),
                        MAX_FINDING,
                        "…",
                    );
                    findings.push(format!("{text} [seed {}]", seed.wrapping_add(batch - 1)));
                    break;
                }
                Err(TestError::Abort(reason)) => {
                    findings.push(format!("aborted: {reason}"));
                    break;
                }
            }
        }
        done.store(1, Relaxed);
    });

    std::panic::set_hook(previous);
    let slowest = *slowest.lock().unwrap_or_else(|p| p.into_inner());
    Report {
        target,
        executions: executions.load(Relaxed),
        elapsed: started.elapsed(),
        slowest,
        seed,
        findings,
    }
}
