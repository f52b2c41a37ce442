//! `libnvmfs_preload.so`: run unmodified programs on an nvmfs image (`nvmfs run`).
//!
//! Loaded with LD_PRELOAD, it interposes the C library's file functions. Every path under
//! the prefix (NVMFS_PREFIX, default /nvmfs) is a file of the image NVMFS_IMAGE, served by
//! the nvmfs core library inside the program's own process: reads and writes are copies
//! between the program's buffers and the image, with no system call. Paths outside the
//! prefix and descriptors the library did not open go to the C library untouched.
//!
//! Several processes share the image through `nvmfs::shared::SharedMount` (one operation
//! at a time, open file descriptions as real descriptors shared across fork and exec).
//! See README.md ("Running programs on nvmfs") and ARCHITECTURE.md for the design, and the
//! module docs for each family of calls.
#![allow(clippy::missing_safety_doc)]

mod cwd;
mod dirs;
mod exports;
mod fdops;
mod fdtable;
mod guard;
mod io;
mod locks;
mod meta;
mod misc;
mod mmap;
mod names;
mod open;
mod real;
mod resolve;
mod spares;
mod state;
mod stdio;

extern "C" fn init() {
    state::init();
}

extern "C" fn fini() {
    state::fini();
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;
