//! The embedded databases the lab runs: each opens its files either on a kernel file
//! system (plain files in a directory) or on nvmfs (through the database's own storage
//! hook, such as a SQLite VFS), so the same workload code measures both.

pub mod sqlite;
