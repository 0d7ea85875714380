//! The console over real HTTP in front of a real server (in this process): each
//! page's HTML, each action's effect, refusals, CSRF, sign-in, escaping and the
//! per-page gRPC call budgets.

mod actions;
mod budget;
mod children;
mod pages;
mod refusals;
mod scale;
mod security;
mod support;
mod transcript;
