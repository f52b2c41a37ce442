//! The filebench personalities (`workloads/*.f` of filebench 1.5): their
//! filesets, thread groups and flowop sequences, with every parameter
//! adjustable.
//!
//! A personality is a [`Workload`]: one flat list of flowops (statistics
//! are kept per entry of it) and the thread groups (filebench's
//! `define process` / `thread` blocks) that each loop over a slice of it.
//! fileserver, webproxy, webserver and varmail have one group; oltp has
//! three (log writer, database writers, shadow readers) tied together by
//! semaphores.

use super::fileset::{FilesetSpec, SizeDist};
use serde::{Deserialize, Serialize};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// The personalities the lab runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Personality {
    Fileserver,
    Webproxy,
    Webserver,
    Varmail,
    Oltp,
}

impl Personality {
    pub const ALL: [Personality; 5] = [
        Personality::Fileserver,
        Personality::Webproxy,
        Personality::Webserver,
        Personality::Varmail,
        Personality::Oltp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Personality::Fileserver => "fileserver",
            Personality::Webproxy => "webproxy",
            Personality::Webserver => "webserver",
            Personality::Varmail => "varmail",
            Personality::Oltp => "oltp",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .copied()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown personality {s:?}; known: fileserver, webproxy, webserver, varmail, oltp"
                )
            })
    }
}

/// Which fileset a flowop works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SetId {
    /// `bigfileset` (oltp: `datafiles`).
    Main,
    /// webserver's `logfiles` (one file), oltp's `logfile`.
    Log,
}

/// One flowop. `fd` is the thread's file slot (filebench's `fd=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    /// Picks an absent file, creates it (O_CREAT|O_RDWR) into `fd`.
    CreateFile {
        fd: usize,
    },
    /// Picks an existing file (round robin) and opens it into `fd`.
    OpenFile {
        fd: usize,
    },
    CloseFile {
        fd: usize,
    },
    /// Writes the file's drawn size in chunks of min(iosize, size).
    WriteWholeFile {
        fd: usize,
        iosize: u64,
    },
    /// Reads from offset 0 to EOF in `iosize` chunks.
    ReadWholeFile {
        fd: usize,
        iosize: u64,
    },
    /// Appends a uniform [0, iosize-1] number of bytes at EOF; 0 is an op
    /// without I/O. Opens `fd` on first use if nothing is open there
    /// (webserver's log file, held open for the whole run).
    AppendFileRand {
        fd: usize,
        iosize: u64,
    },
    Fsync {
        fd: usize,
    },
    /// Picks an existing file that no thread has open and unlinks it.
    DeleteFile,
    /// Picks an existing file and stats it by path.
    StatFile,
    /// `read` with `random,opennext`: one `iosize` pread at a random
    /// iosize-aligned offset in [0, size - iosize] of the thread's next
    /// file (see the engine's rotating slots).
    ReadRandom {
        iosize: u64,
    },
    /// `write` with `random,opennext`, like [`Op::ReadRandom`]; with `dsync`
    /// the write is made durable before the op ends (fsync on kernel
    /// targets; nvmfs writes are durable on return).
    WriteRandom {
        iosize: u64,
        dsync: bool,
    },
    /// `hog value=N`: N stores to the thread's memory (CPU think time).
    Hog {
        value: u64,
    },
    /// `semblock value=V,highwater=H`: each thread running it owns one
    /// semaphore (see [`super::sem`]).
    SemBlock {
        value: u64,
        highwater: u64,
    },
    /// `sempost value=V,target=T[,blocking]`: posts to every instance of the
    /// semblock flowop at index `target` of the workload's flowop list.
    SemPost {
        target: usize,
        value: u64,
        blocking: bool,
    },
}

impl Op {
    /// Filebench counts reads and writes separately in its IO summary.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::ReadWholeFile { .. } | Op::ReadRandom { .. } => OpKind::Read,
            Op::WriteWholeFile { .. } | Op::AppendFileRand { .. } | Op::WriteRandom { .. } => {
                OpKind::Write
            }
            Op::SemBlock { .. } | Op::SemPost { .. } => OpKind::Sync,
            Op::Hog { .. } => OpKind::Cpu,
            _ => OpKind::Other,
        }
    }
}

/// Filebench's flowop types: reads, writes and other file operations are
/// `FLOW_TYPE_IO` and make up the IO summary; semaphores (`FLOW_TYPE_SYNC`)
/// and hog (`FLOW_TYPE_OTHER`) only appear in the per-flowop table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Read,
    Write,
    /// Open, close, create, delete, stat, fsync.
    Other,
    Sync,
    Cpu,
}

impl OpKind {
    /// Counted in the IO summary (and by the trial's op limit).
    pub fn is_io(self) -> bool {
        matches!(self, OpKind::Read | OpKind::Write | OpKind::Other)
    }
}

/// A named flowop of a thread's loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flowop {
    pub name: String,
    pub set: SetId,
    /// `iters`: the flowop runs this many times in a row per loop, each run
    /// one op of its own (as `flowop_start` does).
    pub iters: u32,
    #[serde(flatten)]
    pub op: Op,
}

impl Flowop {
    fn new(name: &str, set: SetId, op: Op) -> Self {
        Flowop {
            name: name.to_string(),
            set,
            iters: 1,
            op,
        }
    }
}

/// A `define process` / `thread` block: `instances` threads, each looping
/// over `flowops` (a range of the workload's flowop list) in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadGroup {
    pub name: String,
    pub instances: usize,
    pub flowops: std::ops::Range<usize>,
}

/// Every flowop of a personality and the thread groups that run them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    pub flowops: Vec<Flowop>,
    pub groups: Vec<ThreadGroup>,
}

impl Workload {
    /// A single group of `threads` threads over all of `flowops`.
    fn one_group(name: &str, threads: usize, flowops: Vec<Flowop>) -> Self {
        Workload {
            groups: vec![ThreadGroup {
                name: name.into(),
                instances: threads,
                flowops: 0..flowops.len(),
            }],
            flowops,
        }
    }

    pub fn threads(&self) -> usize {
        self.groups.iter().map(|g| g.instances).sum()
    }

    /// Index of the flowop called `name`, for sempost targets.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.flowops.iter().position(|f| f.name == name)
    }
}

/// oltp's parameters beyond the common ones (`workloads/oltp.f`). For oltp,
/// `PersonalityConfig::threads` is `nshadows`, `files` is `nfiles`,
/// `mean_file_size_bytes` is `filesize` and `iosize_bytes` is `iosize`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OltpConfig {
    /// `ndbwriters`: database writer threads.
    pub db_writers: usize,
    /// `nlogfiles`: files of the `logfile` fileset.
    pub log_files: usize,
    /// `logfilesize`.
    pub log_file_size_bytes: u64,
    /// lg-write's `iosize` (256k).
    pub log_iosize_bytes: u64,
    /// dbwrite-a's `iters`: random writes per database writer loop.
    pub dbwr_iters: u32,
    /// dbwr-hog's `value`.
    pub dbwr_hog: u64,
    /// `usermode`: shadowhog's `value`.
    pub shadow_hog: u64,
    /// lg-block's `value` and `highwater`.
    pub lg_block_value: u64,
    pub lg_block_highwater: u64,
    /// dbwr-block's `value` and `highwater`.
    pub dbwr_block_value: u64,
    pub dbwr_block_highwater: u64,
    /// `dsync` on lg-write and dbwrite-a.
    pub dsync: bool,
}

impl Default for OltpConfig {
    /// The values of oltp.f.
    fn default() -> Self {
        OltpConfig {
            db_writers: 10,
            log_files: 1,
            log_file_size_bytes: 10 * MIB,
            log_iosize_bytes: 256 * KIB,
            dbwr_iters: 100,
            dbwr_hog: 10_000,
            shadow_hog: 200_000,
            lg_block_value: 3200,
            lg_block_highwater: 1000,
            dbwr_block_value: 1000,
            dbwr_block_highwater: 2000,
            dsync: true,
        }
    }
}

/// Filebench allows at most this many files in a fileset read or written
/// with `opennext` (`THREADFLOW_MAXFD / 2`).
pub const OPENNEXT_FILES_MAX: usize = 64;

/// All parameters of a personality run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PersonalityConfig {
    pub personality: Personality,
    /// `nfiles`.
    pub files: usize,
    /// `meandirwidth`.
    pub dir_width: f64,
    /// `meanfilesize` / `filesize`.
    pub mean_file_size_bytes: u64,
    pub size_dist: SizeDist,
    /// `nthreads`.
    pub threads: usize,
    /// `iosize`: read chunk and whole-file write chunk.
    pub iosize_bytes: u64,
    /// `meanappendsize`: appends are uniform in [0, this - 1].
    pub append_size_bytes: u64,
    /// `prealloc` percentage of bigfileset.
    pub prealloc_percent: u32,
    /// `dirgamma` / 1000 and `sizegamma` / 1000.
    pub dir_gamma: f64,
    pub size_gamma: f64,
    /// oltp's own parameters; `None` for the other personalities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oltp: Option<OltpConfig>,
}

impl PersonalityConfig {
    /// The defaults of filebench 1.5's `.f` file (WORKLOADS.md section 2),
    /// with Gamma(1.5) sizes (say so in reports; 1.5 makes plain `size=`
    /// exact, which only changes webproxy).
    pub fn defaults(p: Personality) -> Self {
        let base = PersonalityConfig {
            personality: p,
            files: 10_000,
            dir_width: 20.0,
            mean_file_size_bytes: 128 * KIB,
            size_dist: SizeDist::Gamma,
            threads: 50,
            iosize_bytes: MIB,
            append_size_bytes: 16 * KIB,
            prealloc_percent: 80,
            dir_gamma: 1.5,
            size_gamma: 1.5,
            oltp: None,
        };
        match p {
            Personality::Fileserver => base,
            Personality::Webproxy => PersonalityConfig {
                dir_width: 1_000_000.0,
                mean_file_size_bytes: 16 * KIB,
                threads: 100,
                ..base
            },
            Personality::Webserver => PersonalityConfig {
                files: 1_000,
                mean_file_size_bytes: 16 * KIB,
                threads: 100,
                prealloc_percent: 100,
                ..base
            },
            Personality::Varmail => PersonalityConfig {
                files: 1_000,
                dir_width: 1_000_000.0,
                mean_file_size_bytes: 16 * KIB,
                threads: 16,
                ..base
            },
            // oltp.f: 10 data files of 10m, 200 shadows, 2k I/O. Its sizes
            // are exact: a plain `size=` in 1.5, and `filesizegamma=0` in
            // the oltp.f of earlier versions.
            Personality::Oltp => PersonalityConfig {
                files: 10,
                dir_width: 1024.0,
                mean_file_size_bytes: 10 * MIB,
                size_dist: SizeDist::Exact,
                threads: 200,
                iosize_bytes: 2 * KIB,
                prealloc_percent: 100,
                oltp: Some(OltpConfig::default()),
                ..base
            },
        }
    }

    /// oltp's parameters (oltp.f's values when none were set).
    pub fn oltp(&self) -> OltpConfig {
        self.oltp.clone().unwrap_or_default()
    }

    pub fn validate(&self) -> Result<(), String> {
        let name = self.personality.name();
        if self.threads == 0 || self.threads > 4096 {
            return Err(format!(
                "{name}: threads must be 1..=4096, got {}",
                self.threads
            ));
        }
        if self.iosize_bytes == 0 || self.iosize_bytes > 64 * MIB {
            return Err(format!(
                "{name}: iosize must be 1 byte..64 MiB, got {}",
                self.iosize_bytes
            ));
        }
        if self.append_size_bytes == 0 || self.append_size_bytes > 64 * MIB {
            return Err(format!(
                "{name}: append size must be 1 byte..64 MiB, got {}",
                self.append_size_bytes
            ));
        }
        if self.mean_file_size_bytes > 1 << 40 {
            return Err(format!("{name}: mean file size too large"));
        }
        self.main_fileset().validate()?;
        if self.personality == Personality::Oltp {
            self.validate_oltp()?;
        }
        if let Some(log) = self.log_fileset() {
            log.validate()?;
        }
        Ok(())
    }

    /// oltp's limits, each naming its oltp.f parameter.
    fn validate_oltp(&self) -> Result<(), String> {
        let o = self.oltp();
        let at_most = |what: &str, v: usize, max: usize| {
            if v > max {
                Err(format!("oltp: {what} must be at most {max}, got {v}"))
            } else {
                Ok(())
            }
        };
        // Every thread keeps every file open (opennext), as filebench does.
        at_most("nfiles (files)", self.files, OPENNEXT_FILES_MAX)?;
        at_most("nlogfiles (log files)", o.log_files, OPENNEXT_FILES_MAX)?;
        at_most("ndbwriters (db writers)", o.db_writers, 4096)?;
        at_most(
            "threads in all (1 + ndbwriters + nshadows)",
            1 + o.db_writers + self.threads,
            4096,
        )?;
        if o.log_files == 0 {
            return Err("oltp: nlogfiles (log files) must be at least 1".into());
        }
        if self.iosize_bytes > self.mean_file_size_bytes {
            return Err(format!(
                "oltp: iosize ({}) must not exceed filesize ({})",
                self.iosize_bytes, self.mean_file_size_bytes
            ));
        }
        if o.log_iosize_bytes == 0 || o.log_iosize_bytes > o.log_file_size_bytes {
            return Err(format!(
                "oltp: the log write size ({}) must be 1..=logfilesize ({})",
                o.log_iosize_bytes, o.log_file_size_bytes
            ));
        }
        if o.log_file_size_bytes > 1 << 40 {
            return Err("oltp: logfilesize too large".into());
        }
        for (what, v) in [
            ("dbwrite-a iters", u64::from(o.dbwr_iters)),
            ("lg-block value", o.lg_block_value),
            ("dbwr-block value", o.dbwr_block_value),
        ] {
            if v == 0 || v > 1 << 30 {
                return Err(format!("oltp: {what} must be 1..=2^30, got {v}"));
            }
        }
        for (what, v) in [
            ("lg-block highwater", o.lg_block_highwater),
            ("dbwr-block highwater", o.dbwr_block_highwater),
            ("dbwr-hog value", o.dbwr_hog),
            ("usermode (shadowhog value)", o.shadow_hog),
        ] {
            if v > 1 << 40 {
                return Err(format!("oltp: {what} must be at most 2^40, got {v}"));
            }
        }
        Ok(())
    }

    /// `bigfileset`.
    pub fn main_fileset(&self) -> FilesetSpec {
        let name = match self.personality {
            Personality::Oltp => "datafiles",
            _ => "bigfileset",
        };
        FilesetSpec {
            name: name.into(),
            entries: self.files,
            dir_width: self.dir_width,
            dir_gamma: self.dir_gamma,
            mean_size_bytes: self.mean_file_size_bytes,
            size_dist: self.size_dist,
            size_gamma: self.size_gamma,
            prealloc_percent: self.prealloc_percent,
        }
    }

    /// webserver's `logfiles` (one file) and oltp's `logfile` (`nlogfiles`
    /// files of `logfilesize`), preallocated.
    pub fn log_fileset(&self) -> Option<FilesetSpec> {
        match self.personality {
            Personality::Webserver => Some(FilesetSpec {
                name: "logfiles".into(),
                entries: 1,
                prealloc_percent: 100,
                ..self.main_fileset()
            }),
            Personality::Oltp => {
                let o = self.oltp();
                Some(FilesetSpec {
                    name: "logfile".into(),
                    entries: o.log_files,
                    mean_size_bytes: o.log_file_size_bytes,
                    prealloc_percent: 100,
                    ..self.main_fileset()
                })
            }
            _ => None,
        }
    }

    /// Every flowop of the workload, the thread groups' loops one after
    /// the other.
    pub fn flowops(&self) -> Vec<Flowop> {
        self.workload().flowops
    }

    /// The thread groups and their loops, in the order of the `.f` file.
    pub fn workload(&self) -> Workload {
        let threads = self.threads;
        match self.personality {
            Personality::Fileserver => Workload::one_group("filereader", threads, self.loop_ops()),
            Personality::Webproxy => Workload::one_group("proxycache", threads, self.loop_ops()),
            Personality::Webserver | Personality::Varmail => {
                Workload::one_group("filereader", threads, self.loop_ops())
            }
            Personality::Oltp => self.oltp_workload(),
        }
    }

    /// oltp.f's three processes. aiowrite becomes a synchronous write, so
    /// lg-aiowait and dbwr-aiowait have nothing left to wait for and are
    /// left out; eventlimit (random-rate) is a no-op without an event
    /// generator (oltp.f sets `eventgen rate = 0`) and is left out too.
    fn oltp_workload(&self) -> Workload {
        let o = self.oltp();
        let mut dbwrite = Flowop::new(
            "dbwrite-a",
            SetId::Main,
            Op::WriteRandom {
                iosize: self.iosize_bytes,
                dsync: o.dsync,
            },
        );
        dbwrite.iters = o.dbwr_iters;
        let any = SetId::Main;
        let mut flowops = vec![
            Flowop::new(
                "lg-write",
                SetId::Log,
                Op::WriteRandom {
                    iosize: o.log_iosize_bytes,
                    dsync: o.dsync,
                },
            ),
            Flowop::new(
                "lg-block",
                any,
                Op::SemBlock {
                    value: o.lg_block_value,
                    highwater: o.lg_block_highwater,
                },
            ),
            dbwrite,
            Flowop::new("dbwr-hog", any, Op::Hog { value: o.dbwr_hog }),
            Flowop::new(
                "dbwr-block",
                any,
                Op::SemBlock {
                    value: o.dbwr_block_value,
                    highwater: o.dbwr_block_highwater,
                },
            ),
            Flowop::new(
                "shadowread",
                SetId::Main,
                Op::ReadRandom {
                    iosize: self.iosize_bytes,
                },
            ),
            Flowop::new(
                "shadowhog",
                any,
                Op::Hog {
                    value: o.shadow_hog,
                },
            ),
        ];
        // Shadows post to every instance of the writers' semblock flowops.
        for (name, target) in [
            ("shadow-post-lg", "lg-block"),
            ("shadow-post-dbwr", "dbwr-block"),
        ] {
            let target = flowops
                .iter()
                .position(|f| f.name == target)
                .expect("semblock flowop defined above");
            flowops.push(Flowop::new(
                name,
                any,
                Op::SemPost {
                    target,
                    value: 1,
                    blocking: true,
                },
            ));
        }
        let group = |name: &str, instances, flowops| ThreadGroup {
            name: name.into(),
            instances,
            flowops,
        };
        Workload {
            groups: vec![
                group("lgwr", 1, 0..2),
                group("dbwr", o.db_writers, 2..5),
                group("shadow", self.threads, 5..9),
            ],
            flowops,
        }
    }

    /// The single thread loop of fileserver, webproxy, webserver, varmail.
    fn loop_ops(&self) -> Vec<Flowop> {
        let io = self.iosize_bytes;
        let app = self.append_size_bytes;
        let main = |name: &str, op: Op| Flowop::new(name, SetId::Main, op);
        match self.personality {
            Personality::Oltp => Vec::new(),
            Personality::Fileserver => vec![
                main("createfile1", Op::CreateFile { fd: 1 }),
                main("wrtfile1", Op::WriteWholeFile { fd: 1, iosize: io }),
                main("closefile1", Op::CloseFile { fd: 1 }),
                main("openfile1", Op::OpenFile { fd: 1 }),
                main("appendfilerand1", Op::AppendFileRand { fd: 1, iosize: app }),
                main("closefile2", Op::CloseFile { fd: 1 }),
                main("openfile2", Op::OpenFile { fd: 1 }),
                main("readfile1", Op::ReadWholeFile { fd: 1, iosize: io }),
                main("closefile3", Op::CloseFile { fd: 1 }),
                main("deletefile1", Op::DeleteFile),
                main("statfile1", Op::StatFile),
            ],
            Personality::Webproxy => {
                let mut ops = vec![
                    main("deletefile1", Op::DeleteFile),
                    main("createfile1", Op::CreateFile { fd: 1 }),
                    main("appendfilerand1", Op::AppendFileRand { fd: 1, iosize: app }),
                    main("closefile1", Op::CloseFile { fd: 1 }),
                ];
                for k in 2..=6 {
                    ops.push(main(&format!("openfile{k}"), Op::OpenFile { fd: 1 }));
                    ops.push(main(
                        &format!("readfile{k}"),
                        Op::ReadWholeFile { fd: 1, iosize: io },
                    ));
                    ops.push(main(&format!("closefile{k}"), Op::CloseFile { fd: 1 }));
                }
                ops
            }
            Personality::Webserver => {
                let mut ops = Vec::new();
                for k in 1..=10 {
                    ops.push(main(&format!("openfile{k}"), Op::OpenFile { fd: 1 }));
                    ops.push(main(
                        &format!("readfile{k}"),
                        Op::ReadWholeFile { fd: 1, iosize: io },
                    ));
                    ops.push(main(&format!("closefile{k}"), Op::CloseFile { fd: 1 }));
                }
                ops.push(Flowop::new(
                    "appendlog",
                    SetId::Log,
                    Op::AppendFileRand {
                        fd: 11,
                        iosize: app,
                    },
                ));
                ops
            }
            Personality::Varmail => vec![
                main("deletefile1", Op::DeleteFile),
                main("createfile2", Op::CreateFile { fd: 1 }),
                main("appendfilerand2", Op::AppendFileRand { fd: 1, iosize: app }),
                main("fsyncfile2", Op::Fsync { fd: 1 }),
                main("closefile2", Op::CloseFile { fd: 1 }),
                main("openfile3", Op::OpenFile { fd: 1 }),
                main("readfile3", Op::ReadWholeFile { fd: 1, iosize: io }),
                main("appendfilerand3", Op::AppendFileRand { fd: 1, iosize: app }),
                main("fsyncfile3", Op::Fsync { fd: 1 }),
                main("closefile3", Op::CloseFile { fd: 1 }),
                main("openfile4", Op::OpenFile { fd: 1 }),
                main("readfile4", Op::ReadWholeFile { fd: 1, iosize: io }),
                main("closefile4", Op::CloseFile { fd: 1 }),
            ],
        }
    }
}

/// The largest fd slot any flowop uses, plus one.
pub const FD_SLOTS: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_f_files() {
        let f = PersonalityConfig::defaults(Personality::Fileserver);
        assert_eq!((f.files, f.threads, f.prealloc_percent), (10_000, 50, 80));
        assert_eq!(f.dir_width, 20.0);
        let w = PersonalityConfig::defaults(Personality::Webserver);
        assert_eq!((w.files, w.threads, w.prealloc_percent), (1_000, 100, 100));
        assert!(w.log_fileset().is_some());
        let v = PersonalityConfig::defaults(Personality::Varmail);
        assert_eq!((v.files, v.threads), (1_000, 16));
        assert_eq!(v.dir_width, 1_000_000.0);
        for p in Personality::ALL {
            let c = PersonalityConfig::defaults(p);
            c.validate().unwrap();
            for op in c.flowops() {
                match op.op {
                    Op::CreateFile { fd }
                    | Op::OpenFile { fd }
                    | Op::CloseFile { fd }
                    | Op::WriteWholeFile { fd, .. }
                    | Op::ReadWholeFile { fd, .. }
                    | Op::AppendFileRand { fd, .. }
                    | Op::Fsync { fd } => assert!(fd < FD_SLOTS),
                    Op::DeleteFile
                    | Op::StatFile
                    | Op::ReadRandom { .. }
                    | Op::WriteRandom { .. }
                    | Op::Hog { .. }
                    | Op::SemBlock { .. }
                    | Op::SemPost { .. } => {}
                }
            }
        }
    }

    #[test]
    fn oltp_defaults_match_oltp_f() {
        let c = PersonalityConfig::defaults(Personality::Oltp);
        c.validate().unwrap();
        // set $nfiles=10, $filesize=10m, $iosize=2k, $nshadows=200;
        // datafiles: dirwidth=1024, prealloc=100, exact sizes.
        assert_eq!((c.files, c.threads, c.prealloc_percent), (10, 200, 100));
        assert_eq!(c.mean_file_size_bytes, 10 << 20);
        assert_eq!(c.iosize_bytes, 2048);
        assert_eq!(c.dir_width, 1024.0);
        assert_eq!(c.size_dist, SizeDist::Exact);
        assert_eq!(c.main_fileset().name, "datafiles");
        let o = c.oltp();
        assert_eq!(o, OltpConfig::default());
        // $ndbwriters=10, $nlogfiles=1, $logfilesize=10m, lg-write iosize=256k,
        // dbwrite-a iters=100, dbwr-hog 10000, $usermode=200000,
        // lg-block value=3200,highwater=1000, dbwr-block value=1000,highwater=2000.
        assert_eq!((o.db_writers, o.log_files), (10, 1));
        assert_eq!(
            (o.log_file_size_bytes, o.log_iosize_bytes),
            (10 << 20, 256 << 10)
        );
        assert_eq!(
            (o.dbwr_iters, o.dbwr_hog, o.shadow_hog),
            (100, 10_000, 200_000)
        );
        assert_eq!((o.lg_block_value, o.lg_block_highwater), (3200, 1000));
        assert_eq!((o.dbwr_block_value, o.dbwr_block_highwater), (1000, 2000));
        assert!(o.dsync);
        let log = c.log_fileset().unwrap();
        assert_eq!((log.name.as_str(), log.entries), ("logfile", 1));
        assert_eq!((log.mean_size_bytes, log.prealloc_percent), (10 << 20, 100));
        assert_eq!(log.size_dist, SizeDist::Exact);
        let w = c.workload();
        assert_eq!(w.threads(), 211, "1 lgwr + 10 dbwr + 200 shadows");
    }

    #[test]
    fn oltp_flowop_order_per_thread_group() {
        let w = PersonalityConfig::defaults(Personality::Oltp).workload();
        let group = |name: &str| -> (usize, Vec<&str>) {
            let g = w.groups.iter().find(|g| g.name == name).unwrap();
            let names = w.flowops[g.flowops.clone()]
                .iter()
                .map(|f| f.name.as_str())
                .collect();
            (g.instances, names)
        };
        assert_eq!(group("lgwr"), (1, vec!["lg-write", "lg-block"]));
        assert_eq!(
            group("dbwr"),
            (10, vec!["dbwrite-a", "dbwr-hog", "dbwr-block"])
        );
        assert_eq!(
            group("shadow"),
            (
                200,
                vec![
                    "shadowread",
                    "shadowhog",
                    "shadow-post-lg",
                    "shadow-post-dbwr"
                ]
            )
        );
        // The groups cover the flowop list once, in order.
        let covered: Vec<usize> = w.groups.iter().flat_map(|g| g.flowops.clone()).collect();
        assert_eq!(covered, (0..w.flowops.len()).collect::<Vec<_>>());
        let f = |n: &str| &w.flowops[w.index_of(n).unwrap()];
        assert_eq!(f("dbwrite-a").iters, 100);
        assert_eq!(
            f("dbwrite-a").op,
            Op::WriteRandom {
                iosize: 2048,
                dsync: true
            }
        );
        assert_eq!(f("lg-write").set, SetId::Log);
        assert_eq!(
            f("lg-write").op,
            Op::WriteRandom {
                iosize: 256 << 10,
                dsync: true
            }
        );
        assert_eq!(f("shadowread").op, Op::ReadRandom { iosize: 2048 });
        assert_eq!(f("shadowhog").op, Op::Hog { value: 200_000 });
        // Posts are blocking, value 1, aimed at the writers' semblocks.
        let lg = w.index_of("lg-block").unwrap();
        let db = w.index_of("dbwr-block").unwrap();
        assert_eq!(
            f("shadow-post-lg").op,
            Op::SemPost {
                target: lg,
                value: 1,
                blocking: true
            }
        );
        assert_eq!(
            f("shadow-post-dbwr").op,
            Op::SemPost {
                target: db,
                value: 1,
                blocking: true
            }
        );
        // Only reads and writes count in the IO summary.
        let io: Vec<&str> = w
            .flowops
            .iter()
            .filter(|f| f.op.kind().is_io())
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(io, ["lg-write", "dbwrite-a", "shadowread"]);
    }

    #[test]
    fn bad_oltp_parameters_are_named() {
        let base = PersonalityConfig::defaults(Personality::Oltp);
        let err = |f: &dyn Fn(&mut PersonalityConfig)| {
            let mut c = base.clone();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert!(err(&|c| c.files = 65).contains("nfiles"));
        assert!(err(&|c| c.iosize_bytes = 11 << 20).contains("iosize"));
        let o = |g: fn(&mut OltpConfig)| {
            move |c: &mut PersonalityConfig| {
                let mut o = c.oltp();
                g(&mut o);
                c.oltp = Some(o);
            }
        };
        assert!(err(&o(|o| o.log_files = 0)).contains("nlogfiles"));
        assert!(err(&o(|o| o.dbwr_iters = 0)).contains("iters"));
        assert!(err(&o(|o| o.lg_block_value = 0)).contains("lg-block value"));
        assert!(err(&o(|o| o.log_iosize_bytes = 20 << 20)).contains("log write size"));
        assert!(err(&o(|o| o.db_writers = 5000)).contains("ndbwriters"));
        assert!(err(&|c| c.threads = 0).contains("threads"));
    }

    #[test]
    fn flowop_order_of_each_personality() {
        let names = |p| -> Vec<String> {
            PersonalityConfig::defaults(p)
                .flowops()
                .into_iter()
                .map(|f| f.name)
                .collect()
        };
        assert_eq!(
            names(Personality::Fileserver),
            [
                "createfile1",
                "wrtfile1",
                "closefile1",
                "openfile1",
                "appendfilerand1",
                "closefile2",
                "openfile2",
                "readfile1",
                "closefile3",
                "deletefile1",
                "statfile1"
            ]
        );
        let wp = names(Personality::Webproxy);
        assert_eq!(wp.len(), 4 + 15);
        assert_eq!(
            &wp[..4],
            [
                "deletefile1",
                "createfile1",
                "appendfilerand1",
                "closefile1"
            ]
        );
        let ws = names(Personality::Webserver);
        assert_eq!(ws.len(), 31);
        assert_eq!(ws.last().unwrap(), "appendlog");
        let vm = names(Personality::Varmail);
        assert_eq!(vm[3], "fsyncfile2");
        assert_eq!(vm.len(), 13);
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut c = PersonalityConfig::defaults(Personality::Fileserver);
        c.threads = 0;
        assert!(c.validate().unwrap_err().contains("threads"));
        c.threads = 1;
        c.files = 0;
        assert!(c.validate().unwrap_err().contains("entries"));
        assert!(Personality::parse("oltp2").is_err());
        assert_eq!(Personality::parse("oltp"), Ok(Personality::Oltp));
    }
}
