//! Benchmarks for nvmfs, used by the `nvmfs bench ...` commands of the CLI.
//!
//! [`micro`] runs the same microbenchmark workloads on nvmfs (in-process) and
//! on kernel file systems (through system calls) and reports ops/s and latency
//! percentiles side by side. [`scale`] measures lookups in a directory of a million
//! files, DRAM held and mount time. [`db`] holds the embedded databases YCSB's workloads
//! ([`ycsb`]) run on. [`pgmeter`] runs Iometer access specifications and [`aim7`] AIM7's disk
//! subtests and disk mix, both on any target.

pub mod aim7;
pub mod chart;
pub mod core_link;
pub mod db;
pub mod filebench;
pub mod ftl;
pub mod kernel;
pub mod mapbench;
pub mod micro;
pub mod pgmeter;
pub mod postmark;
pub mod scale;
pub mod stats;
pub mod study;
pub mod targets;
#[cfg(test)]
mod test_probe;
#[cfg(test)]
mod test_targets;
pub mod tpcc;
pub mod ycsb;
