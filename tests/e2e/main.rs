//! End-to-end tests: real `railyard` processes over real sockets. One test binary (one
//! link instead of five); each file is a module, so test names read `crash::...`,
//! `worker_e2e::...`. `support` is the local-cluster runner they share.

mod support;

mod approvals;
mod attributes;
mod auth;
mod batches;
mod bench_agents;
mod bench_fanout;
mod bench_preload;
mod bench_processes;
mod bench_streams;
mod checkpoint_resume;
mod children;
mod cli_commands;
mod cluster;
mod cluster_faults;
mod console;
mod contracts;
mod crash;
mod crash_cycles;
mod delivery;
mod dev;
mod failover;
mod flow_control;
mod rate_limit_park;

mod guardrails;
mod issues;
mod journal;
mod live_output;
mod logs;
mod mcp;
mod mcp_attributes;
mod mcp_contracts;
mod mcp_filesystem;
mod mcp_http;
mod mcp_sessions;
mod mcp_steps;
mod mcp_tools;
mod model_fallback;
mod namespaces;
mod polls;
mod postgres;
mod postgres_ops;
mod postgres_soak;
mod postgres_tls;
mod principles;
mod prompt_cache;
mod queries;
mod registered;
mod reset;
mod schedules;
mod server_e2e;
mod service;
mod store_moves;
mod tls;
mod traces;
mod triggers;
mod web_fetch;
mod worker_bounds;
mod worker_e2e;
