//! The ways the lab reaches a file system, shared by every benchmark.
//!
//! Workloads are written once against [`api::MicroFs`] / [`api::MicroFile`];
//! [`sys`] implements them with system calls on a directory (tmpfs, a
//! kernel file system, a FUSE mount) and [`nvmfs`] with the nvmfs library
//! in-process; [`fuse`] mounts an nvmfs image through FUSE for [`sys`] to use.

pub mod api;
pub mod fuse;
pub mod nvmfs;
pub mod sys;
