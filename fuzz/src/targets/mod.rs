//! The fuzz targets: each a strategy of inputs (generated, and mutated from its
//! corpus) and a `check` that is the property every input must hold. A cargo-fuzz
//! target can call the same `check` functions on its own inputs.

pub mod hook;
pub mod query;
pub mod service;
pub mod spec;
pub mod template;
pub mod token;
pub mod workflow;
