//! The worker's integration tests, in one test binary (one link instead of four); each
//! file is a module, so test names read `providers::...`, `runner::...`. `common` holds
//! the fakes and doubles they share.

mod common;

mod bash_env;
mod contracts;
mod file_bounds;
mod guardrails;
mod providers;
mod response_cap;
mod runner;
mod scripted_agent;
mod streaming;
mod tools;
