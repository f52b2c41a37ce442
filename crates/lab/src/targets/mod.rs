//! The ways the lab reaches a file system, shared by every benchmark.
//!
//! Workloads are written once against [`api::MicroFs`] / [`api::MicroFile`];
//! [`sys`] implements them with system calls on a directory (tmpfs, a
//! kernel file system, a FUSE mount) and [`nvmfs`] with the nvmfs library
//! in-process.

pub mod api;
pub mod nvmfs;
pub mod sys;
