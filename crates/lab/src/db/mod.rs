//! Embedded databases behind YCSB's [`KvStore`](crate::ycsb::db::KvStore) interface, each
//! on a kernel file system or on nvmfs, so that the workloads of [`crate::ycsb`] can compare
//! file systems under real storage engines.

pub mod leveldb;
