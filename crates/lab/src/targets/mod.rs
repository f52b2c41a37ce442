//! The ways the lab reaches a file system, shared by every benchmark.
//!
//! Workloads are written once against [`api::MicroFs`] / [`api::MicroFile`];
//! [`sys`] implements them with system calls on a directory (tmpfs, a
//! kernel file system, a FUSE mount) and [`nvmfs`] with the nvmfs library
//! in-process; [`fuse`] mounts an nvmfs image through FUSE for [`sys`] to use.
//! In tests, `mem` is an in-memory target that logs every call.

pub mod api;
pub mod fuse;
#[cfg(test)]
pub mod mem;
pub mod nvmfs;
pub mod preload;
pub mod sys;
