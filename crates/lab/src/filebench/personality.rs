//! The filebench personalities (`workloads/*.f` of filebench 1.5): their
//! filesets, thread counts and flowop sequences, with every parameter
//! adjustable.

use super::fileset::{FilesetSpec, SizeDist};
use serde::Serialize;

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
}

impl Personality {
    pub const ALL: [Personality; 4] = [
        Personality::Fileserver,
        Personality::Webproxy,
        Personality::Webserver,
        Personality::Varmail,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Personality::Fileserver => "fileserver",
            Personality::Webproxy => "webproxy",
            Personality::Webserver => "webserver",
            Personality::Varmail => "varmail",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .copied()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown personality {s:?}; known: fileserver, webproxy, webserver, varmail"
                )
            })
    }
}

/// Which fileset a flowop works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SetId {
    /// `bigfileset`.
    Main,
    /// webserver's `logfiles` (one file).
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
}

impl Op {
    /// Filebench counts reads and writes separately in its IO summary.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::ReadWholeFile { .. } => OpKind::Read,
            Op::WriteWholeFile { .. } | Op::AppendFileRand { .. } => OpKind::Write,
            _ => OpKind::Other,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Read,
    Write,
    Other,
}

/// A named flowop of a thread's loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flowop {
    pub name: String,
    pub set: SetId,
    #[serde(flatten)]
    pub op: Op,
}

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
        }
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
        self.main_fileset().validate()
    }

    /// `bigfileset`.
    pub fn main_fileset(&self) -> FilesetSpec {
        FilesetSpec {
            name: "bigfileset".into(),
            entries: self.files,
            dir_width: self.dir_width,
            dir_gamma: self.dir_gamma,
            mean_size_bytes: self.mean_file_size_bytes,
            size_dist: self.size_dist,
            size_gamma: self.size_gamma,
            prealloc_percent: self.prealloc_percent,
        }
    }

    /// webserver's `logfiles`: one file, preallocated.
    pub fn log_fileset(&self) -> Option<FilesetSpec> {
        (self.personality == Personality::Webserver).then(|| FilesetSpec {
            name: "logfiles".into(),
            entries: 1,
            prealloc_percent: 100,
            ..self.main_fileset()
        })
    }

    /// The thread loop, in the order of the `.f` file.
    pub fn flowops(&self) -> Vec<Flowop> {
        let io = self.iosize_bytes;
        let app = self.append_size_bytes;
        let main = |name: &str, op: Op| Flowop {
            name: name.to_string(),
            set: SetId::Main,
            op,
        };
        match self.personality {
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
                ops.push(Flowop {
                    name: "appendlog".into(),
                    set: SetId::Log,
                    op: Op::AppendFileRand {
                        fd: 11,
                        iosize: app,
                    },
                });
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
                    Op::DeleteFile | Op::StatFile => {}
                }
            }
        }
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
    }
}
