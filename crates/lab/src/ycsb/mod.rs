//! YCSB's core workloads (A-F) against embedded databases, after YCSB's CoreWorkload, its
//! generators and its client (brianfrankcooper/YCSB, `core/src/main/java/site/ycsb`).
//!
//! Layout, one mechanism per module:
//! - [`db`]: the database interface the workloads run against ([`db::KvStore`], one
//!   [`db::KvSession`] per client thread); backends implement it.
//! - [`generator`]: YCSB's number generators — counters (plain and acknowledged, shared
//!   between threads), Zipfian, scrambled Zipfian, skewed latest, uniform, hotspot and the
//!   discrete operation chooser — and `fnvhash64`.
//! - [`workload`]: CoreWorkload's properties and the presets A-F ([`CoreWorkload`]).
//! - [`client`]: the generators built from them, key names and values as YCSB builds them,
//!   and the per-thread operation step (choose the operation and key, do it, time it).
//! - [`measure`]: per-operation HDR latency histograms (YCSB's measurement series).
//! - [`runner`]: the load and run phases over N threads, flat out or at a target throughput,
//!   with a time limit and an interrupt check; results as [`PhaseResult`].
//! - [`memory`]: an in-memory store, the test model for workloads and backends.
//!
//! Typical use: `let w = CoreWorkload::preset('a')?;` then [`runner::load`] and
//! [`runner::run`] on the same store with the same workload.

pub mod client;
pub mod db;
pub mod generator;
pub mod measure;
pub mod memory;
pub mod runner;
pub mod workload;

#[cfg(test)]
mod tests;

pub use measure::{OpKind, OpStats};
pub use memory::MemoryStore;
pub use runner::{load, run, Phase, PhaseResult, RunOptions};
pub use workload::{
    CoreWorkload, FieldLengthDistribution, InsertOrder, RequestDistribution, ScanLengthDistribution,
};
