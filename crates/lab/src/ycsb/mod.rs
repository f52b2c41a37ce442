//! YCSB's core workloads (A-F) against embedded databases.

pub mod db;
