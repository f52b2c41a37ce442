//! `nvmfs`: create, check, inspect and benchmark nvmfs images.

mod bench;
mod bench_aim7;
mod bench_db;
mod bench_filebench;
mod bench_filemark;
mod bench_ftl;
mod bench_lab;
mod bench_pgmeter;
mod bench_postmark;
mod bench_targets;
mod bench_tpcc;
mod bench_ycsb;
mod crashtest;
mod fsck;
mod info;
mod mkfs;
mod mount;
mod output;
mod run;
mod size;
mod study;
mod study_map;
mod study_nvmfs2013;
mod trace;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "nvmfs",
    version,
    about = "Create, check, inspect, mount and benchmark nvmfs images",
    long_about = "Create, check, inspect, mount and benchmark nvmfs images.\n\n\
        nvmfs is a crash-consistent file system for byte-addressable persistent memory that runs \
        in user space on a memory-mapped image file (on /dev/shm, a DAX file system, or any \
        file). These commands work on the image file; `nvmfs mount` serves it through FUSE.",
    after_help = "Sizes accept plain bytes or binary units: 4096, 64K, 512M, 8G, 1T (also KiB, MiB, GiB, TiB).\n\
        Run `nvmfs help <COMMAND>` or `nvmfs <COMMAND> --help` for details.",
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Mkfs(mkfs::Args),
    Fsck(fsck::Args),
    Info(info::Args),
    Mount(mount::Args),
    Bench(bench::Args),
    Crashtest(crashtest::Args),
    Run(run::Args),
    Study(study::Args),
    Trace(trace::Args),
    /// One cell of a study in a child under `nvmfs run` (the study's run:nvmfs target)
    #[command(hide = true)]
    StudyCell(study::CellArgs),
}

fn main() -> ExitCode {
    output::restore_sigpipe();
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).chain(["help"]).collect();
    let cli = match Cli::try_parse_from(mount::helper_form(std::env::args_os().collect(), &names)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Usage errors of fsck get e2fsck's 16 ("usage or syntax error"), so that
            // scripts testing fsck's exit bits do not read 2 as "corrected, reboot".
            let code = match e.exit_code() {
                2 if std::env::args().nth(1).as_deref() == Some("fsck") => fsck::EXIT_USAGE,
                c => u8::try_from(c).unwrap_or(2),
            };
            return ExitCode::from(code);
        }
    };
    if let Err(e) = nvmfs::media::no_flush_requested() {
        eprintln!("nvmfs: {e}");
        return ExitCode::from(2);
    }
    let code = match cli.command {
        Command::Mkfs(args) => mkfs::run(&args),
        Command::Fsck(args) => fsck::run(&args),
        Command::Info(args) => info::run(&args),
        Command::Mount(args) => mount::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Crashtest(args) => crashtest::run_cmd(&args),
        Command::Run(args) => run::run(&args),
        Command::Study(args) => study::run(&args),
        Command::Trace(args) => trace::run(&args),
        Command::StudyCell(args) => study::run_cell(&args),
    };
    ExitCode::from(code)
}
