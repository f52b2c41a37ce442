//! The embedded databases the lab runs: each opens its files either on a kernel file
//! system (plain files in a directory) or on nvmfs (through the database's own storage
//! hook: a SQLite VFS, a LevelDB `Env`), so the same workload code ([`crate::ycsb`],
//! [`crate::tpcc`]) measures both.

pub mod home;
pub mod leveldb;
pub mod sqlite;
