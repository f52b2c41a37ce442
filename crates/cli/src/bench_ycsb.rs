//! `nvmfs bench ycsb`: one YCSB core workload (A-F) on SQLite or LevelDB, on one or more
//! targets, with the lab's run rules (load once, warm-up, several trials on a remounted
//! file system, the first discarded, 95% intervals).

use clap::builder::PossibleValuesParser;
use nvmfs_lab::db::leveldb::LevelDbSettings;
use nvmfs_lab::db::sqlite::SqliteSettings;
use nvmfs_lab::kernel;
use nvmfs_lab::study::database::{self, Engine, YcsbWorkload};
use nvmfs_lab::study::nvm2015::ycsb_paper_load;
use nvmfs_lab::study::StudyProgress;
use serde::Serialize;

use crate::bench_db::{self, set, with_default, Bench, Record, RunArgs, RunSettings, SqliteArgs};
use crate::size::{format_size, parse_size};

const RECORDS: u64 = 100_000;
const THREADS: usize = 2;
const MAX_SCAN_LENGTH: u64 = 100;

#[derive(clap::Args, Debug)]
#[command(
    about = "One YCSB workload (A-F) on SQLite or LevelDB, on nvmfs and kernel file systems",
    long_about = "Runs one YCSB core workload (a: 50% reads 50% updates, b: 95/5 reads/updates, \
        c: reads only, d: 95% reads of the latest records 5% inserts, e: 95% short scans 5% \
        inserts, f: 50% reads 50% read-modify-writes; YCSB's workloads/workloada..f, zipfian \
        keys, 10 fields of 100 bytes) on SQLite (the table usertable) or LevelDB, on each \
        target in turn, with the lab's run rules: the target made fresh, --records records \
        loaded once by --threads client threads, then --trials trials, each a --warmup not \
        recorded and --seconds measured, the database reopened and the file system remounted \
        before each (nvmfs and the kernel variants; tmpfs and dir: targets cannot be). The \
        first of several trials is discarded. Each trial continues the key space where the \
        last one left it, so inserts (d, e) never collide. After the last trial SQLite's \
        PRAGMA integrity_check must pass.\n\n\
        The measured phase runs flat out, or with --target-ops at that offered load (YCSB's \
        -target: operations paced over the threads), for latency at a load every target \
        sustains.\n\n\
        stdout gets, per target, the mean ops/s of the kept trials with its 95% interval and \
        per operation type (READ, UPDATE, INSERT, SCAN, READ-MODIFY-WRITE, and *-FAILED if \
        any) over the kept trials: the count summed, the mean over every operation, the \
        largest max, and the last kept trial's p50, p95 and p99 (percentiles of separate \
        trials do not combine). Progress goes to stderr; --json FILE gets everything, every \
        trial's YCSB result included.",
    after_help = "Defaults: SQLite as the study runs it (WAL, synchronous NORMAL, the database \
        mapped with mmap_size twice the records' size and at least 64M, 4096-byte pages), or \
        LevelDB with seed 002's settings (128M table files, 4M write buffer, 8M block cache, no \
        compression, writes not synced). SQLite flags are refused with --db leveldb and \
        LevelDB flags with --db sqlite.\n\n\
        Targets: nvmfs (the library in-process on a fresh image in --shm-dir; SQLite through \
        nvmfs's VFS, LevelDB through nvmfs's Env), tmpfs (a fresh directory in --shm-dir, \
        through system calls), dir:PATH (a fresh subdirectory of PATH), or a kernel variant of \
        `nvmfs study` made fresh on a RAM-backed loop device (ext2, ext3, ext3-writeback, \
        ext3-journal, ext4, ext4-nodelalloc, xfs, xfs-ag, btrfs; needs root). Default: nvmfs \
        and tmpfs.\n\n\
        Exit status: 0 on success, 1 when a run failed or no target could run, 2 on bad input, \
        130 when interrupted.\n\n\
        Examples:\n  nvmfs bench ycsb --workload a\n  \
        nvmfs bench ycsb -w b --records 1000000 --threads 4 -t nvmfs -t ext4 --seconds 10\n  \
        nvmfs bench ycsb -w a --target-ops 5000 --journal-mode delete --synchronous full\n  \
        nvmfs bench ycsb -w e --db leveldb --write-buffer-size 16M --json ycsb-e.json",
    mut_arg("journal_mode", |a| with_default(a, "wal")),
    mut_arg("synchronous", |a| with_default(a, "normal")),
    mut_arg("mmap_size", |a| with_default(a, "twice the records' size, at least 64M"))
)]
pub struct Args {
    /// The YCSB core workload: a, b, c, d, e or f
    #[arg(short, long, value_name = "LETTER", ignore_case = true,
        value_parser = PossibleValuesParser::new(["a", "b", "c", "d", "e", "f"]))]
    workload: String,
    /// The database
    #[arg(long, value_enum, default_value_t = Db::Sqlite)]
    db: Db,
    #[arg(long, value_name = "N", help = format!("Records loaded (YCSB's recordcount) [default: {RECORDS}]"))]
    records: Option<u64>,
    #[arg(long, value_name = "N", help = format!("Client threads of the load and of every phase [default: {THREADS}]"))]
    threads: Option<usize>,
    /// Offered load of the measured phase (and warm-up), ops/s over all threads (YCSB's
    /// -target) [default: flat out]
    #[arg(long, value_name = "N")]
    target_ops: Option<f64>,
    #[arg(long, value_name = "N", help = format!("Longest scan of workload e (maxscanlength) [default: {MAX_SCAN_LENGTH}, as workloade]"))]
    max_scan_length: Option<u64>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    sqlite: SqliteArgs,
    #[command(flatten)]
    leveldb: LevelDbArgs,
}

/// The databases YCSB runs on.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Db {
    Sqlite,
    Leveldb,
}

/// LevelDB's settings as flags; refused with --db sqlite.
#[derive(clap::Args, Debug)]
struct LevelDbArgs {
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = leveldb_default(
        "LevelDB: target size of a table file (max_file_size)", |s| format_size(s.max_file_size as u64)))]
    max_file_size: Option<u64>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = leveldb_default(
        "LevelDB: bytes gathered in the memtable before a level-0 table is written \
        (write_buffer_size)", |s| format_size(s.write_buffer_size as u64)))]
    write_buffer_size: Option<u64>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = leveldb_default(
        "LevelDB: DRAM cache of table blocks", |s| format_size(s.block_cache_bytes as u64)))]
    block_cache: Option<u64>,
    /// LevelDB: write every update with sync = true (the log flushed before it returns)
    #[arg(long)]
    sync_writes: bool,
}

fn leveldb_default(text: &str, value: impl Fn(&LevelDbSettings) -> String) -> String {
    format!("{text} [default: {}]", value(&LevelDbSettings::default()))
}

impl LevelDbArgs {
    fn given(&self) -> bool {
        self.max_file_size.is_some()
            || self.write_buffer_size.is_some()
            || self.block_cache.is_some()
            || self.sync_writes
    }

    /// LevelDB's defaults with the given flags applied, checked.
    fn settings(&self) -> Result<LevelDbSettings, String> {
        let mut s = LevelDbSettings::default();
        set(&mut s.max_file_size, usize_of(self.max_file_size)?);
        set(&mut s.write_buffer_size, usize_of(self.write_buffer_size)?);
        set(&mut s.block_cache_bytes, usize_of(self.block_cache)?);
        s.sync_writes = self.sync_writes;
        s.check().map_err(|e| e.to_string())?;
        Ok(s)
    }
}

fn usize_of(v: Option<u64>) -> Result<Option<usize>, String> {
    v.map(|b| usize::try_from(b).map_err(|_| format!("{b} bytes: too large")))
        .transpose()
}

/// The workload the flags describe, checked.
fn workload(args: &Args) -> Result<YcsbWorkload, String> {
    let letter = args
        .workload
        .to_ascii_lowercase()
        .chars()
        .next()
        .unwrap_or('?');
    let records = args.records.unwrap_or(RECORDS);
    if records == 0 {
        return Err("--records must be at least 1".into());
    }
    let threads = args.threads.unwrap_or(THREADS);
    if threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    if let Some(t) = args.target_ops {
        if !t.is_finite() || t <= 0.0 {
            return Err(format!("--target-ops must be > 0 ops/s, got {t}"));
        }
    }
    let max_scan_length = args.max_scan_length.unwrap_or(MAX_SCAN_LENGTH);
    if max_scan_length == 0 {
        return Err("--max-scan-length must be at least 1".into());
    }
    let w = YcsbWorkload {
        letter,
        records,
        threads,
        // Only the study's two-phase trials read this; the bench's phase is --target-ops.
        fixed_load_ops_per_sec: args.target_ops.unwrap_or(0.0),
        paper_load_ops_per_sec: ycsb_paper_load(letter),
        max_scan_length,
        engine: engine(args, records)?,
    };
    database::ycsb_core(&w).map_err(|e| e.to_string())?;
    Ok(w)
}

fn engine(args: &Args, records: u64) -> Result<Engine, String> {
    match args.db {
        Db::Sqlite if args.leveldb.given() => Err(
            "the LevelDB flags (--max-file-size, --write-buffer-size, --block-cache, \
             --sync-writes) do not apply to --db sqlite"
                .into(),
        ),
        Db::Sqlite => Ok(Engine::Sqlite(
            args.sqlite.apply(database::ycsb_sqlite(records))?,
        )),
        Db::Leveldb if args.sqlite.given() => Err(
            "the SQLite flags (--journal-mode, --synchronous, --mmap-size, --page-size, \
             --cache-size) do not apply to --db leveldb"
                .into(),
        ),
        Db::Leveldb => Ok(Engine::Leveldb(args.leveldb.settings()?)),
    }
}

/// The configuration, for the JSON file.
#[derive(Serialize)]
struct Config<'a> {
    workload: String,
    records: u64,
    threads: usize,
    /// `null`: flat out.
    target_ops_per_sec: Option<f64>,
    max_scan_length: u64,
    database: &'a Engine,
    #[serde(flatten)]
    run: RunSettings,
}

pub fn run(args: &Args) -> u8 {
    let prepared = workload(args).and_then(|w| {
        let settings = args.run.settings()?;
        let image = database::ycsb_image(&w);
        let device = bench_db::device_bytes(image);
        let wanted = args.run.targets(device)?;
        Ok((w, settings, image, device, wanted))
    });
    let (w, settings, image, device, wanted) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmfs bench ycsb: {e}");
            return 2;
        }
    };
    if let Err(code) = bench_db::start("ycsb", args.run.json.as_ref()) {
        return code;
    }
    let config = Config {
        workload: format!("ycsb-{}", w.letter),
        records: w.records,
        threads: w.threads,
        target_ops_per_sec: args.target_ops,
        max_scan_length: w.max_scan_length,
        database: &w.engine,
        run: settings,
    };
    describe(&config);
    let bench = Bench {
        command: "ycsb",
        workload: config.workload.clone(),
        metric: "ops/s",
        image,
        rules: args.run.rules(&settings, device),
    };
    let phases = [args.target_ops];
    let run_on = |target, progress: &mut dyn StudyProgress| {
        database::run_ycsb_on(
            target,
            &w,
            &phases,
            &bench.rules,
            &kernel::interrupted,
            progress,
        )
    };
    let format = |r: &mut Record| format_record(r, args.target_ops);
    match bench_db::run_all(&bench, &wanted, &run_on, &format) {
        Ok(records) => bench_db::finish(
            "ycsb",
            "nvmfs-lab/bench-ycsb/v1",
            args.run.json.as_ref(),
            &config,
            &records,
        ),
        Err(code) => code,
    }
}

/// The run's settings on stderr, so that a saved table says what it measured.
fn describe(c: &Config<'_>) {
    let load = match c.target_ops_per_sec {
        Some(t) => format!("at {t} ops/s offered"),
        None => "flat out".to_string(),
    };
    eprintln!(
        "{}: {} records, {} threads, {load}, on {}; {} trial(s) of {} s warm-up + {} s, seed {}",
        c.workload,
        c.records,
        c.threads,
        engine_line(c.database),
        c.run.trials,
        c.run.warmup_seconds,
        c.run.run_seconds,
        c.run.seed
    );
}

fn engine_line(e: &Engine) -> String {
    match e {
        Engine::Sqlite(s) => sqlite_line(s),
        Engine::Leveldb(s) => format!(
            "LevelDB (max_file_size {}, write_buffer_size {}, block cache {}, sync_writes {})",
            format_size(s.max_file_size as u64),
            format_size(s.write_buffer_size as u64),
            format_size(s.block_cache_bytes as u64),
            s.sync_writes
        ),
    }
}

/// SQLite's settings in one line (the engine line of the table adds the version and VFS).
pub fn sqlite_line(s: &SqliteSettings) -> String {
    format!(
        "SQLite (journal_mode {}, synchronous {}, mmap_size {}, page_size {}, cache_size {})",
        s.journal_mode,
        s.synchronous,
        format_size(s.mmap_size),
        s.page_size,
        s.cache_size
    )
}

fn format_record(r: &Record, target_ops: Option<f64>) -> String {
    let mut lines = String::new();
    if let Some(result) = &r.result {
        lines += &format!("load: {:.2} s\n", result.setup_seconds);
    }
    if let Some(t) = target_ops {
        lines += &format!("offered load: {t} ops/s\n");
    }
    lines += &bench_db::format_summary("ops/s", r.ops_per_sec);
    bench_db::format_record(r, &lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use nvmfs_lab::db::sqlite::{JournalMode, Synchronous};

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Result<Args, String> {
        Cli::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))
            .map(|c| c.args)
            .map_err(|e| e.to_string())
    }

    fn workload_of(argv: &[&str]) -> Result<YcsbWorkload, String> {
        workload(&parse(argv)?)
    }

    #[test]
    fn defaults_are_the_study_sqlite_settings() {
        let w = workload_of(&["--workload", "A"]).unwrap();
        assert_eq!(w.letter, 'a');
        assert_eq!((w.records, w.threads, w.max_scan_length), (100_000, 2, 100));
        assert_eq!(w.engine, Engine::Sqlite(database::ycsb_sqlite(100_000)));
        let a = parse(&["-w", "a"]).unwrap();
        assert_eq!(a.target_ops, None);
        assert_eq!(a.run.settings().unwrap().trials, bench_db::TRIALS);
    }

    #[test]
    fn flags_set_the_workload_and_the_engine() {
        let w = workload_of(&[
            "-w",
            "e",
            "--records",
            "500",
            "--threads",
            "3",
            "--max-scan-length",
            "10",
            "--journal-mode",
            "delete",
            "--synchronous",
            "full",
            "--mmap-size",
            "1M",
            "--cache-size",
            "-100",
        ])
        .unwrap();
        assert_eq!((w.letter, w.records, w.threads), ('e', 500, 3));
        let Engine::Sqlite(s) = &w.engine else {
            panic!("{:?}", w.engine)
        };
        assert_eq!(
            (s.journal_mode, s.synchronous, s.mmap_size, s.cache_size),
            (JournalMode::Delete, Synchronous::Full, 1 << 20, -100)
        );
        let w = workload_of(&["-w", "b", "--db", "leveldb", "--block-cache", "1M"]).unwrap();
        let expected = LevelDbSettings {
            block_cache_bytes: 1 << 20,
            ..LevelDbSettings::default()
        };
        assert_eq!(w.engine, Engine::Leveldb(expected));
        assert_eq!(
            parse(&["-w", "a", "--target-ops", "500"])
                .unwrap()
                .target_ops,
            Some(500.0)
        );
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let err = parse(&["-w", "g"]).err().unwrap();
        assert!(
            err.contains("'g'") && err.contains("possible values"),
            "{err}"
        );
        assert!(parse(&[]).err().unwrap().contains("--workload"));
        let err = workload_of(&["-w", "a", "--records", "0"]).unwrap_err();
        assert!(err.contains("--records must be at least 1"), "{err}");
        let err = workload_of(&["-w", "a", "--threads", "0"]).unwrap_err();
        assert!(err.contains("--threads must be at least 1"), "{err}");
        let err = workload_of(&["-w", "a", "--target-ops", "0"]).unwrap_err();
        assert!(err.contains("--target-ops"), "{err}");
        let err = workload_of(&["-w", "a", "--max-scan-length", "0"]).unwrap_err();
        assert!(err.contains("--max-scan-length"), "{err}");
        let err = parse(&["-w", "a", "--journal-mode", "off"]).err().unwrap();
        assert!(err.contains("unknown journal mode"), "{err}");
        let err = workload_of(&["-w", "a", "--page-size", "1000"]).unwrap_err();
        assert!(err.contains("page size 1000"), "{err}");
    }

    #[test]
    fn the_other_engines_flags_are_refused() {
        let err = workload_of(&["-w", "a", "--sync-writes"]).unwrap_err();
        assert!(
            err.contains("LevelDB flags") && err.contains("--db sqlite"),
            "{err}"
        );
        let err =
            workload_of(&["-w", "a", "--db", "leveldb", "--journal-mode", "wal"]).unwrap_err();
        assert!(
            err.contains("SQLite flags") && err.contains("--db leveldb"),
            "{err}"
        );
        let err =
            workload_of(&["-w", "a", "--db", "leveldb", "--write-buffer-size", "4K"]).unwrap_err();
        assert!(
            err.contains("write_buffer_size") && err.contains("64 KiB"),
            "{err}"
        );
    }

    #[test]
    fn help_gives_the_commands_own_sqlite_defaults() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let help = |id: &str| {
            let arg = cmd.get_arguments().find(|a| a.get_id() == id).unwrap();
            arg.get_help().unwrap().to_string()
        };
        assert!(help("synchronous").ends_with("[default: normal]"));
        assert!(help("journal_mode").ends_with("[default: wal]"));
        assert!(help("mmap_size").contains("[default: twice the records' size"));
    }

    #[test]
    fn run_flags_are_checked() {
        let err = parse(&["-w", "a", "--seconds", "0"])
            .unwrap()
            .run
            .settings();
        assert!(err.unwrap_err().contains("--seconds"));
        let err = parse(&["-w", "a", "--trials", "0"]).unwrap().run.settings();
        assert!(err.unwrap_err().contains("--trials"));
        let err = parse(&["-w", "a", "--shm-dir", "/nonexistent/x"])
            .unwrap()
            .run
            .settings();
        assert!(err.unwrap_err().contains("not a directory"));
    }
}
