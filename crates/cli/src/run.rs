//! `nvmfs run`: runs a program with the preload library, so that a path prefix is an nvmfs
//! image served inside the program's own process (and its children's).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nvmfs::layout::superblock::{MAGIC, REPLICA_BLOCK};
use nvmfs::layout::BLOCK_SIZE;

/// File name of the preload library (`cargo build --release` puts it next to `nvmfs`).
pub const LIB_NAME: &str = "libnvmfs_preload.so";

/// Exit status of `nvmfs run` when it fails before running PROGRAM (as env and timeout).
pub const EXIT_RUN_FAILED: u8 = 125;

#[derive(clap::Args, Debug)]
#[command(
    about = "Run a program with an nvmfs image at a path prefix, served inside the program (LD_PRELOAD)",
    long_about = "Run PROGRAM with the nvmfs preload library, so that every path under PREFIX \
        (default /nvmfs) is a file of IMAGE, served by the nvmfs library inside the program's \
        own process: reads and writes are copies between the program's buffers and the image, \
        with no system call on the data path. Paths outside PREFIX and descriptors the \
        library did not open go to the C library untouched. The prefix behaves like a mount \
        point: `ls /nvmfs`, `cd /nvmfs` and relative paths after chdir into it work, and \
        `stat /nvmfs` shows the image's root.\n\n\
        Child processes inherit the setting (LD_PRELOAD, NVMFS_IMAGE, NVMFS_PREFIX, NVMFS_RO \
        are set in the environment), open nvmfs files across fork and exec, and a working \
        directory inside nvmfs. Several processes can use one image at once; a FUSE mount or \
        any other exclusive mount of the image must not be active.\n\n\
        Not covered: statically linked programs, programs that make system calls directly \
        (Go, io_uring), executing programs stored in nvmfs (\"#!\" scripts are run by their \
        interpreter), posix_spawn file actions that open nvmfs paths, and programs that clear \
        LD_PRELOAD from the environment of their children without going through exec*(). \
        See README.md, \"Running programs on nvmfs\".",
    after_help = "Exit status: PROGRAM's; 125 if nvmfs run itself failed (no image, no preload \
        library), 126 if PROGRAM could not be executed, 127 if it was not found.\n\n\
        The library is looked for in NVMFS_PRELOAD (a path), then next to the nvmfs binary, \
        then in the other cargo profile's directory (target/release, target/debug). Build it \
        with `cargo build --release`.\n\n\
        Examples:\n  nvmfs mkfs --size 1G /dev/shm/nv.img\n  nvmfs run --image /dev/shm/nv.img -- \
        sh -c 'cp -a ~/src /nvmfs/ && ls -l /nvmfs/src'\n  nvmfs run --image /dev/shm/nv.img \
        --prefix /data -- sqlite3 /data/app.db 'create table t(x)'\n  nvmfs run --image \
        /dev/shm/nv.img --ro -- tar -C /nvmfs -cf /tmp/backup.tar ."
)]
pub struct Args {
    /// The nvmfs image [default: $NVMFS_IMAGE]
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<PathBuf>,
    /// Absolute directory at which the image's root appears
    #[arg(long, value_name = "DIR", default_value = "/nvmfs")]
    pub prefix: String,
    /// Read-only: every change under the prefix fails with EROFS
    #[arg(long)]
    pub ro: bool,
    /// The program to run and its arguments (after `--`)
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub program: Vec<OsString>,
}

pub fn run(args: &Args) -> u8 {
    match prepare(args) {
        Ok(mut cmd) => {
            let e = cmd.exec();
            eprintln!(
                "nvmfs run: cannot run {}: {e}",
                Path::new(&args.program[0]).display()
            );
            if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            }
        }
        Err(msg) => {
            eprintln!("nvmfs run: {msg}");
            EXIT_RUN_FAILED
        }
    }
}

/// Where the preload library is: NVMFS_PRELOAD, next to this binary, or the other cargo
/// profile's directory.
pub fn find_library(exe: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("NVMFS_PRELOAD").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(absolute(&p))
        } else {
            Err(format!(
                "NVMFS_PRELOAD={} is not a file (it must name {LIB_NAME})",
                p.display()
            ))
        };
    }
    let mut tried = Vec::new();
    if let Some(dir) = exe.and_then(Path::parent) {
        tried.push(dir.join(LIB_NAME));
        if let Some(target) = dir.parent() {
            for profile in ["release", "debug"] {
                let p = target.join(profile).join(LIB_NAME);
                if !tried.contains(&p) {
                    tried.push(p);
                }
            }
        }
    }
    for p in &tried {
        if p.is_file() {
            return Ok(p.clone());
        }
    }
    Err(format!(
        "the preload library {LIB_NAME} was not found (looked in {}); build it with \
         `cargo build --release` in the nvmfs source tree, or point NVMFS_PRELOAD at it",
        tried
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// Checks that `image` is an nvmfs image (magic of the superblock or its replica).
pub fn check_image(image: &Path) -> Result<(), String> {
    let mut f = std::fs::File::open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("{}: {e}", image.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", image.display()));
    }
    let mut buf = vec![0u8; 2 * BLOCK_SIZE as usize];
    let n = f
        .read(&mut buf)
        .map_err(|e| format!("{}: {e}", image.display()))?;
    let magic_at = |off: usize| {
        buf.get(off..off + 8)
            .is_some_and(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) == MAGIC)
    };
    if n >= 8 && (magic_at(0) || magic_at((REPLICA_BLOCK * BLOCK_SIZE) as usize)) {
        check_not_exclusive(&f, image)
    } else {
        Err(format!(
            "{}: not an nvmfs image (no superblock); create one with `nvmfs mkfs`",
            image.display()
        ))
    }
}

/// Refuses an image that a plain mount holds (`nvmfs mount`, `fsck -y`, a benchmark): the
/// program would start and then meet EIO on every path under the prefix. A probe of the
/// shared lock that shared mounts take, released at once.
fn check_not_exclusive(f: &std::fs::File, image: &Path) -> Result<(), String> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on our own descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "{}: image is mounted exclusively by another process (nvmfs mount, fsck -y, a benchmark); unmount it first",
            image.display()
        ));
    }
    // SAFETY: as above.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
    Ok(())
}

/// The command to exec: PROGRAM with LD_PRELOAD and the NVMFS_* variables set.
pub fn prepare(args: &Args) -> Result<Command, String> {
    let image = args
        .image
        .clone()
        .or_else(|| {
            std::env::var_os("NVMFS_IMAGE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .ok_or("no image: give --image IMAGE (or set NVMFS_IMAGE)")?;
    let image = absolute(&image);
    check_image(&image)?;
    let prefix = args.prefix.trim_end_matches('/');
    if !prefix.starts_with('/') || prefix.is_empty() || prefix.split('/').any(|c| c == "..") {
        return Err(format!(
            "--prefix {}: must be an absolute directory other than / (without ..)",
            args.prefix
        ));
    }
    let exe = std::env::current_exe().ok();
    let lib = find_library(exe.as_deref())?;
    let mut preload: OsString = lib.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        let already = old
            .as_bytes()
            .split(|&b| b == b':' || b == b' ')
            .any(|p| Path::new(OsStr::from_bytes(p)) == lib);
        preload = if already {
            old
        } else {
            let mut v = old.into_vec();
            v.push(b':');
            v.extend_from_slice(lib.as_os_str().as_bytes());
            OsString::from_vec(v)
        };
    }
    let mut cmd = Command::new(&args.program[0]);
    cmd.args(&args.program[1..])
        .env("LD_PRELOAD", preload)
        .env("NVMFS_IMAGE", &image)
        .env("NVMFS_PREFIX", prefix);
    if args.ro {
        cmd.env("NVMFS_RO", "1");
    } else {
        cmd.env_remove("NVMFS_RO");
    }
    Ok(cmd)
}
