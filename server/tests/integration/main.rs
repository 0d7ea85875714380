//! The server's integration tests: a real `RunningServer` on a real redb file, driven
//! over real gRPC and HTTP. One test binary (one link instead of one per file); each
//! file is a module. The same binary runs every test on PostgreSQL instead with
//! `RAILYARD_TEST_BACKEND=postgres` and `RAILYARD_TEST_POSTGRES` set (`support.rs`;
//! `.ci/run` does); the few tests of redb's own files say they skipped.

mod answer_bounds;
mod api;
mod approvals;
mod attributes;
mod auth;
mod batches;
mod bounds;
mod checkpoints;
mod children;
mod contracts;
mod definitions;
mod delivery;
mod delivery_guards;
mod disk_faults;
mod flow;
mod follower;
mod key_scope;
mod listener;
mod metrics;
mod namespaces;
mod output;
mod output_sse;
mod poll_guards;
mod poll_mock;
mod polls;
mod queries;
mod registered;
mod reset;
mod retention;
mod run_poll;
mod schedules;
mod support;
mod tls;
mod transcripts;
mod triggers;
mod unstorable;
mod upgrade;
mod usage;
mod watch_bounds;
