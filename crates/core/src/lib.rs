//! nvmfs: a crash-consistent file system for byte-addressable persistent memory, in user
//! space. It runs on a memory-mapped region (a file in /dev/shm by default), keeps no page
//! cache, updates in place, and makes every operation durable and atomic before it returns.
//!
//! ```no_run
//! use nvmfs::{Fs, FormatOptions, MountOptions, OpenOptions};
//! use std::io::Write;
//! Fs::format("/dev/shm/demo.img", &FormatOptions { size_bytes: 64 << 20, inode_count: None, ..Default::default() })?;
//! let fs = Fs::mount("/dev/shm/demo.img", &MountOptions::default())?;
//! fs.create_dir("/docs")?;
//! let mut f = OpenOptions::new().write(true).create(true).open(&fs, "/docs/hello.txt")?;
//! f.write_all(b"hello")?;
//! drop(f);
//! fs.unmount()?;
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod alloc;
pub mod fs;
pub mod fsck;
mod hook;
pub mod info;
pub mod journal;
pub mod layout;
pub mod mapping;
pub mod media;
pub mod shared;
pub mod testing;
pub mod tier;

pub use fs::{
    errno_of, DirEntry, DirectMap, File, FormatOptions, Fs, MappingProbe, Metadata, MountOptions,
    OpenOptions, ProbeFile, RecoveryReport, RenameFlags, SetAttr, SetTime, Statfs, TierFormat,
};
pub use layout::inode::FileType;
pub use layout::Corrupted;
pub use mapping::MappingKind;
