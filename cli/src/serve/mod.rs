//! The long-running commands, which serve until they are stopped: `server`, `worker`,
//! `dev` (both in one process) and `mcp` (the MCP gateway on stdio), and the demo
//! built into the binary that `server` and `dev` fall back on.

pub(crate) mod builtin;
pub(crate) mod console;
pub(crate) mod dev;
pub(crate) mod mcp;
pub(crate) mod server;
pub(crate) mod signals;
pub(crate) mod worker;
