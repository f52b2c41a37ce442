//! `nvmfs crashtest`: checks crash consistency by machine (persistence tracer, crash images at
//! every fence, recovery + fsck + state oracle), and the mutation check of flush/fence sites.

use std::path::PathBuf;

use nvmfs_crashtest::trace::Tear;
use nvmfs_crashtest::{concurrent, recovered};
use nvmfs_crashtest::{
    mutation_check, run, with_tear, workloads_for, MappingKind, Suite, Workload,
};

#[derive(clap::Args, Debug)]
#[command(
    about = "Check crash consistency: crash images at every fence of ACE and random workloads",
    long_about = "Check crash consistency the way Chipmunk and Vinter check PM file systems.\n\n\
        Each workload runs on a fresh in-memory image with every persistent store, flush and \
        fence recorded. At every fence the images a power loss could leave (x86 model: a line is \
        durable after flush + fence, in-flight lines may or may not persist, stores to a line \
        persist in order; with --tear words a store's words may persist independently, \
        sampled) are built and each is checked: fsck clean, mount with recovery succeeds, the \
        tree (names, types, sizes, link counts, blocks, modes, owners, rdev, times, contents) \
        equals the state before or after the operation in flight (an in-place write may be \
        torn word by word, times may lag where GUARANTEES.md says), fsck clean after recovery, \
        and a crash during that recovery recovers to the same tree. Stores not durable when an \
        operation returns, and workload operations that fail or change nothing, are violations \
        too.\n\n\
        Workloads: --ace seq1 (every single ACE operation), --ace seq2 (every ordered pair), \
        --random N --seed S (N random sequences of up to 20 operations). --concurrent N --seed S: \
        N workloads of 2-4 operations run on threads of their own (one journal lane each) and \
        switched at every fence, every crash image checked against every combination of \
        before/after of the operations in flight. --after-recovery N --seed S: a crash image \
        that recovery repairs, then recovery, more operations, a clean unmount and remount and \
        more operations, every fence of it crash-checked as one history. --mutations skips each \
        flush/fence call site in turn and reports which skips the workloads catch.",
    after_help = "Exit status: 0 no violation, 1 violations found (or uncaught mutations), 2 usage.\n\n\
        Examples:\n  nvmfs crashtest --ace seq1\n  nvmfs crashtest --ace seq2 --sample 300 --seed 7\n  \
        nvmfs crashtest --random 10000 --seed 1\n  nvmfs crashtest --ace seq2 --only 1234\n  \
        nvmfs crashtest --mapping extent --ace seq1\n  nvmfs crashtest --tear words --ace seq1\n  \
        nvmfs crashtest --concurrent 1000 --seed 1\n  \
        nvmfs crashtest --after-recovery 200 --seed 1\n  nvmfs crashtest --tier --ace seq1\n  \
        nvmfs crashtest --mutations"
)]
pub struct Args {
    /// ACE workload set: seq1 or seq2
    #[arg(long, value_name = "SET", value_parser = ["seq1", "seq2"])]
    ace: Option<String>,
    /// Bigger images: more than 200 hole fills, a multi-block directory, ENOSPC paths
    #[arg(long)]
    big: bool,
    /// Run N random sequences (seeds S..S+N)
    #[arg(long, value_name = "N")]
    random: Option<u64>,
    /// First seed of --random; with --sample, the shuffle seed
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Run only a seeded sample of K workloads of the set
    #[arg(long, value_name = "K")]
    sample: Option<usize>,
    /// Run only workload number I of the set (as printed with a violation)
    #[arg(long, value_name = "I")]
    only: Option<usize>,
    /// Concurrent check: N workloads (seeds S..S+N) of 2-4 operations on their own threads
    /// and journal lanes, switched at every fence; every crash image checked against every
    /// combination of before/after of the operations in flight
    #[arg(long, value_name = "N")]
    concurrent: Option<u64>,
    /// Crash after recovery: N workloads (seeds S..S+N), each a crash image that recovery
    /// repairs, mounted (recovery), 1-3 operations, clean unmount, remount, 1-3 operations,
    /// with every fence of that whole history crash-checked as one persistence history
    #[arg(long, value_name = "N")]
    after_recovery: Option<u64>,
    /// Mutation check: skip each flush/fence call site in turn (over ACE seq1, or the given set)
    #[arg(long)]
    mutations: bool,
    /// Process-kill check: N cycles of a child process killed with SIGKILL mid-workload on an
    /// image in /dev/shm, then recovery, fsck and a check of every acknowledged operation
    #[arg(long, value_name = "N")]
    kill: Option<u64>,
    /// (internal) run the process-kill child workload on IMAGE
    #[arg(long, value_name = "IMAGE", hide = true)]
    kill_child: Option<PathBuf>,
    /// File mapping of the images: hashfs, extent, radix, cuckoo or level
    #[arg(long, value_name = "MAPPING", default_value = "hashfs",
        value_parser = ["hashfs", "extent", "radix", "cuckoo", "level"])]
    mapping: String,
    /// Tearing model of in-flight stores: lines (a line keeps a prefix of its stores, each
    /// store's part of a line whole) or words (also any subset of a store's 8-byte words,
    /// 16-byte for non-temporal stores: --tear-samples seeded images per fence on top)
    #[arg(long, value_name = "MODEL", default_value = "lines", value_parser = ["lines", "words"])]
    tear: String,
    /// With --tear words: random word-torn images per fence
    #[arg(long, value_name = "N", default_value_t = 32)]
    tear_samples: usize,
    /// Run the workloads (--ace, --random) on tiered images: an SSD tier under PM (in memory,
    /// part of every crash state), files starting cold, every write flushing to the SSD. With
    /// --kill: the child works on an 8 MiB PM image over a 256 MiB SSD file
    #[arg(long)]
    tier: bool,
    /// Worker threads
    #[arg(long, value_name = "T", default_value_t = 2)]
    threads: usize,
    /// Also write the summary as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn select(args: &Args) -> Result<Vec<Workload>, String> {
    let suite = match (&args.ace, args.random) {
        (Some(_), Some(_)) => return Err("give --ace or --random, not both".into()),
        (None, None) if args.big => Suite::Big,
        (Some(s), None) if s == "seq2" => Suite::Seq2,
        (None, Some(count)) => Suite::Random {
            count,
            seed: args.seed,
        },
        _ => Suite::Seq1,
    };
    let mapping: MappingKind = args.mapping.parse()?;
    let tear = match args.tear.as_str() {
        "words" => Tear::Words {
            samples: args.tear_samples,
        },
        _ => Tear::Lines,
    };
    let mut list = with_tear(workloads_for(&suite, mapping), tear);
    if let Some(i) = args.only {
        if i >= list.len() {
            return Err(format!("--only {i}: the set has {} workloads", list.len()));
        }
        list = vec![list.swap_remove(i)];
    }
    if let Some(k) = args.sample {
        fastrand::Rng::with_seed(args.seed).shuffle(&mut list);
        list.truncate(k);
    }
    Ok(list)
}

pub fn run_cmd(args: &Args) -> u8 {
    if let Some(image) = &args.kill_child {
        return match nvmfs_crashtest::kill::child_main(image) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("nvmfs crashtest child: {e}");
                1
            }
        };
    }
    if let Some(cycles) = args.kill {
        return run_kill(cycles, args.seed, args.tier);
    }
    if let Some(count) = args.concurrent {
        return run_concurrent(count, args);
    }
    if let Some(count) = args.after_recovery {
        return run_after_recovery(count, args);
    }
    let list = match select(args) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("nvmfs crashtest: {e}");
            return 2;
        }
    };
    if args.mutations {
        if args.tier {
            eprintln!("nvmfs crashtest: --mutations runs on PM-only images, not with --tier");
            return 2;
        }
        return run_mutations(&list, args);
    }
    let list = if args.tier {
        if args.mapping != "hashfs" || args.big {
            eprintln!("nvmfs crashtest: --tier runs on hashfs images and takes no --big");
            return 2;
        }
        nvmfs_crashtest::with_tier(list)
    } else {
        list
    };
    let start = std::time::Instant::now();
    let progress = Progress::new(list.len());
    let s = run(&list, args.threads, &|_, _| progress.tick());
    let summary = format!(
        "{} workloads, {} fences, {} crash images checked, {} violations ({:.1} s)",
        s.workloads,
        s.fences,
        s.images,
        s.violations.len(),
        start.elapsed().as_secs_f64()
    );
    report(args, &s, &s.violations, &summary)
}

/// "n/total workloads" on stderr every 100 workloads and at the last.
struct Progress {
    done: std::sync::atomic::AtomicUsize,
    total: usize,
}

impl Progress {
    fn new(total: usize) -> Progress {
        Progress {
            done: std::sync::atomic::AtomicUsize::new(0),
            total,
        }
    }

    fn tick(&self) {
        let n = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if n.is_multiple_of(100) || n == self.total {
            eprint!("\r{n}/{} workloads", self.total);
        }
    }
}

/// Ends a checking run: the violations and the summary line on stdout, the summary as JSON
/// to `--json` when asked. Exit code 1 with violations, 2 when the JSON cannot be written.
fn report<S: serde::Serialize>(args: &Args, s: &S, violations: &[String], summary: &str) -> u8 {
    eprintln!();
    for v in violations {
        println!("VIOLATION {v}");
    }
    println!("{summary}");
    if let Some(p) = &args.json {
        if let Err(e) = std::fs::write(
            p,
            serde_json::to_string_pretty(s).expect("serialisable") + "\n",
        ) {
            eprintln!("nvmfs crashtest: cannot write {}: {e}", p.display());
            return 2;
        }
    }
    u8::from(!violations.is_empty())
}

/// The mapping and tearing model of `--concurrent` and `--after-recovery`, which take no
/// workload set of their own.
fn special(args: &Args, flag: &str) -> Result<(MappingKind, Tear), String> {
    if args.ace.is_some() || args.random.is_some() || args.big || args.mutations || args.tier {
        return Err(format!(
            "{flag} takes no --ace, --random, --big, --mutations or --tier"
        ));
    }
    if args.concurrent.is_some() && args.after_recovery.is_some() {
        return Err("give --concurrent or --after-recovery, not both".into());
    }
    let mapping: MappingKind = args.mapping.parse()?;
    let tear = match args.tear.as_str() {
        "words" => Tear::Words {
            samples: args.tear_samples,
        },
        _ => Tear::Lines,
    };
    Ok((mapping, tear))
}

fn run_concurrent(count: u64, args: &Args) -> u8 {
    let (mapping, tear) = match special(args, "--concurrent") {
        Ok(x) => x,
        Err(e) => {
            eprintln!("nvmfs crashtest: {e}");
            return 2;
        }
    };
    let start = std::time::Instant::now();
    let list = concurrent::workloads(count, args.seed, mapping, tear);
    let progress = Progress::new(list.len());
    let s = concurrent::run(&list, args.threads, &|_| progress.tick());
    let summary = format!(
        "{} concurrent workloads ({} operations), {} fences, {} crash images checked \
         ({} with 2+ journal lanes rolled back, {} crash points with 2+ operations in flight; \
         {} thread switches, {} lock-wait handoffs), {} violations ({:.1} s)",
        s.workloads,
        s.operations,
        s.fences,
        s.images,
        s.multi_lane_images,
        s.overlapping_points,
        s.switches,
        s.steals,
        s.violations.len(),
        start.elapsed().as_secs_f64()
    );
    report(args, &s, &s.violations, &summary)
}

fn run_after_recovery(count: u64, args: &Args) -> u8 {
    let (mapping, tear) = match special(args, "--after-recovery") {
        Ok(x) => x,
        Err(e) => {
            eprintln!("nvmfs crashtest: {e}");
            return 2;
        }
    };
    let start = std::time::Instant::now();
    let list = recovered::workloads(count, args.seed, mapping, tear);
    let progress = Progress::new(list.len());
    let s = recovered::run(&list, args.threads, &|_| progress.tick());
    let summary = format!(
        "{} workloads after recovery ({} from crash images that recovery repaired; {} steps), \
         {} fences, {} crash images checked ({} after the clean unmount), {} violations ({:.1} s)",
        s.workloads,
        s.repaired,
        s.steps,
        s.fences,
        s.images,
        s.images_after_unmount,
        s.violations.len(),
        start.elapsed().as_secs_f64()
    );
    report(args, &s, &s.violations, &summary)
}

fn run_mutations(list: &[Workload], args: &Args) -> u8 {
    let results = mutation_check(list, &|r| {
        let verdict = match &r.caught_by {
            Some(v) => format!("caught: {}", v.chars().take(120).collect::<String>()),
            None => "NOT CAUGHT".into(),
        };
        println!("{:<55} {verdict}", r.site);
    });
    let missed = results.iter().filter(|r| r.caught_by.is_none()).count();
    println!(
        "{} flush/fence sites, {} caught, {missed} not caught",
        results.len(),
        results.len() - missed
    );
    if let Some(p) = &args.json {
        let _ = std::fs::write(
            p,
            serde_json::to_string_pretty(&results).expect("serialisable") + "\n",
        );
    }
    u8::from(missed > 0)
}

fn run_kill(cycles: u64, seed: u64, tier: bool) -> u8 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("nvmfs crashtest: {e}");
            return 2;
        }
    };
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let image = dir.join(format!("nvmfs-kill-{}.img", std::process::id()));
    let ssd = dir.join(format!("nvmfs-kill-{}.ssd", std::process::id()));
    let mut failures = 0;
    let mut acked_total = 0;
    let mut cycles_on_ssd = 0;
    for s in seed..seed + cycles {
        let mut child = std::process::Command::new(&exe);
        child.args(["crashtest", "--kill-child"]);
        let r = if tier {
            nvmfs_crashtest::kill::cycle_tiered(&mut child, &image, &ssd, s)
        } else {
            nvmfs_crashtest::kill::cycle(&mut child, &image, s).map(|a| (a, 0))
        };
        match r {
            Ok((acked, on_ssd)) => {
                acked_total += acked;
                cycles_on_ssd += u64::from(on_ssd > 0);
            }
            Err(e) => {
                failures += 1;
                let t = if tier { "--tier " } else { "" };
                println!("VIOLATION [nvmfs crashtest {t}--kill 1 --seed {s}] {e}");
            }
        }
    }
    let _ = std::fs::remove_file(&image);
    let _ = std::fs::remove_file(&ssd);
    let tiered = if tier {
        format!(" (tiered: {cycles_on_ssd} with file data on the SSD after recovery)")
    } else {
        String::new()
    };
    println!(
        "{cycles} kill cycles{tiered}, {acked_total} acknowledged operations checked, {failures} violations"
    );
    u8::from(failures > 0)
}
