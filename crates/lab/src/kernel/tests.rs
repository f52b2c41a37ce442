//! Tests of the kernel provisioning. Those that mount need root and the
//! file system; without them they print "skipped: ..." and pass. They hold
//! one lock so that `live_resources()` is theirs alone to check.

use super::command::CommandLine;
use super::*;
use crate::study::tests::provisioning_turn;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;

const SIZE: u64 = MIN_DEVICE_BYTES;
const GIB: u64 = 1 << 30;
const SHM: &str = "/dev/shm";

/// The catalogued variant `name` if it can run here, else prints why not.
fn runnable(name: &str) -> Option<Variant> {
    let Some(v) = catalogue(SIZE).into_iter().find(|v| v.name == name) else {
        println!("skipped: {name} is not in this machine's catalogue");
        return None;
    };
    match availability(&v) {
        Availability::Available => Some(v),
        Availability::Unavailable { reason } => {
            println!("skipped: {name}: {reason}");
            None
        }
    }
}

fn names(vs: &[Variant]) -> Vec<&str> {
    vs.iter().map(|v| v.name.as_str()).collect()
}

#[test]
fn catalogue_order_names_and_paper_names() {
    let all = catalogue(SIZE);
    let base = [
        ("ext2", Some("ext2-buf"), "ext2"),
        ("ext3", Some("ext3-buf"), "ext3"),
        ("ext3-writeback", None, "ext3"),
        ("ext3-journal", Some("ext3-data"), "ext3"),
        ("ext4", Some("ext4-buf"), "ext4"),
        ("ext4-nodelalloc", Some("ext4-no-del"), "ext4"),
        ("xfs", Some("xfs-buf-4"), "xfs"),
        ("xfs-ag7", Some("xfs-buf-464"), "xfs"),
        ("btrfs", None, "btrfs"),
        ("tmpfs", None, "tmpfs"),
    ];
    assert!(all.len() >= base.len(), "{:?}", names(&all));
    for (v, (name, paper, fs_type)) in all.iter().zip(base) {
        assert_eq!(v.name, name);
        assert_eq!(v.paper_name.as_deref(), paper, "{name}");
        assert_eq!(v.fs_type, fs_type, "{name}");
        assert!(!v.description.is_empty() && !v.description.contains('\n'));
    }
    // Only the study's optional families may follow.
    for v in &all[base.len()..] {
        assert!(
            ["f2fs", "nilfs2"].contains(&v.fs_type.as_str()),
            "{}",
            v.name
        );
    }
    let mut unique = names(&all);
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "names are unique");
}

#[test]
fn catalogue_options() {
    let all = catalogue(SIZE);
    let get = |name: &str| all.iter().find(|v| v.name == name).unwrap();
    for v in all.iter().filter(|v| v.fs_type.starts_with("ext")) {
        let args = v.mkfs_args.join(" ");
        assert!(
            args.starts_with(&format!("mkfs.{} -F -q -b 4096", v.fs_type)),
            "{args}"
        );
    }
    assert_eq!(get("ext3").mount_options, "data=ordered");
    assert_eq!(get("ext3-writeback").mount_options, "data=writeback");
    assert_eq!(get("ext3-journal").mount_options, "data=journal");
    assert_eq!(get("ext4-nodelalloc").mount_options, "nodelalloc");
    assert_eq!(get("xfs").mkfs_args, ["mkfs.xfs", "-f", "-q"]);
    assert_eq!(
        get("xfs-ag7").mkfs_args,
        ["mkfs.xfs", "-f", "-q", "-d", "agcount=7"]
    );
    assert_eq!(get("btrfs").mkfs_args, ["mkfs.btrfs", "-f", "-q"]);
    let tmpfs = get("tmpfs");
    assert!(tmpfs.mkfs_args.is_empty() && !tmpfs.is_block_backed());
    assert_eq!(tmpfs.mount_options, format!("size={SIZE}"));
    assert!(all
        .iter()
        .filter(|v| v.name != "tmpfs")
        .all(Variant::is_block_backed));
}

#[test]
fn xfs_agcount_fits_the_minimum_log() {
    // Checked against mkfs.xfs 6.1: 7 AGs fit 512 MiB, 8 do not; 31 fit
    // 2 GiB, 32 do not.
    assert_eq!(xfs_high_agcount(512 << 20), 7);
    assert_eq!(xfs_high_agcount(2 * GIB), 31);
    assert_eq!(xfs_high_agcount(30 * GIB), PAPER_XFS_AGCOUNT);
    assert_eq!(xfs_high_agcount(58 * GIB), 464);
    // Too small to make at all (create refuses), but still well-formed.
    assert_eq!(xfs_high_agcount(64 << 20), 1);
    assert_eq!(xfs_high_agcount(0), 1);
    let names_at = |size| {
        names(&catalogue(size))
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    assert!(names_at(2 * GIB).contains(&"xfs-ag31".to_string()));
    assert!(names_at(64 * GIB).contains(&"xfs-ag464".to_string()));
    assert!(names_at(64 << 20).contains(&"xfs-ag1".to_string()));
}

#[test]
fn unavailable_variants_are_reported_with_reasons() {
    let missing = unavailable_variants();
    for (name, reason) in &missing {
        println!("not runnable here: {name}: {reason}");
        assert!(!reason.is_empty());
    }
    let missing_names: Vec<&str> = missing.iter().map(|(n, _)| n.as_str()).collect();
    assert!(missing_names.contains(&"ext2-xip") && missing_names.contains(&"ext3-xip"));
    let catalogued: Vec<Option<String>> =
        catalogue(SIZE).into_iter().map(|v| v.paper_name).collect();
    for paper in ["f2fs_2", "f2fs_4", "f2fs_6", "nilfs"] {
        let listed = catalogued.contains(&Some(paper.to_string()));
        assert!(
            listed != missing_names.contains(&paper),
            "{paper}: in exactly one list"
        );
    }
}

#[test]
fn availability_names_what_is_missing() {
    let mut v = catalogue(SIZE).remove(4);
    v.fs_type = "nosuchfs".into();
    let Availability::Unavailable { reason } = availability(&v) else {
        panic!("nosuchfs available");
    };
    assert!(
        reason.contains("nosuchfs") || reason.contains("root"),
        "{reason}"
    );
    let mut v = catalogue(SIZE).remove(4);
    v.mkfs_args[0] = "mkfs.nosuch".into();
    let Availability::Unavailable { reason } = availability(&v) else {
        panic!("mkfs.nosuch available");
    };
    assert!(
        reason.contains("mkfs.nosuch not found") || reason.contains("root"),
        "{reason}"
    );
}

#[test]
fn create_refuses_bad_sizes_before_doing_anything() {
    let v = catalogue(SIZE).remove(0);
    for size in [64 << 20, SIZE - 4096, 0] {
        let e = Provisioned::create(&v, Path::new(SHM), size)
            .err()
            .expect("too small");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("512 MiB"), "{e}");
    }
    let e = Provisioned::create(&v, Path::new(SHM), SIZE + 1)
        .err()
        .expect("unaligned");
    assert!(e.to_string().contains("multiple of 4096"), "{e}");
}

#[test]
fn command_errors_name_command_status_and_stderr() {
    let e = CommandLine::new("sh", &["-c", "echo first >&2; echo second >&2; exit 3"])
        .run()
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("`sh -c 'echo first"), "{msg}");
    assert!(
        msg.contains("exit status: 3") && msg.contains("first / second"),
        "{msg}"
    );
    let e = CommandLine::new("/nonexistent/nvmfs-no-such-program", &["x"])
        .run()
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert!(
        e.to_string()
            .contains("/nonexistent/nvmfs-no-such-program is not installed"),
        "{e}"
    );
    assert_eq!(
        CommandLine::new("echo", &["a b", "it's"]).to_string(),
        r"echo 'a b' 'it'\''s'"
    );
}

/// Asserts that nothing provisioned under `info` is left on the system.
fn assert_gone(info: &ProvisionInfo) {
    let mp = Path::new(&info.mount_point);
    assert!(!resource::is_mounted(mp), "{} still mounted", mp.display());
    assert!(!mp.exists(), "{} still exists", mp.display());
    if let Some(file) = &info.backing_file {
        assert!(!Path::new(file).exists(), "{file} still exists");
        let losetup = CommandLine::new("losetup", &["-a"]).run().unwrap();
        assert!(
            !losetup.contains(file.as_str()),
            "still attached: {losetup}"
        );
    }
    assert_eq!(live_resources(), Vec::<String>::new());
}

/// Asserts that this process has no backing file or mount point left.
fn assert_nothing_left() {
    let pid = std::process::id();
    for (dir, prefix) in [
        (Path::new(SHM).to_path_buf(), format!("nvmfs-lab-{pid}-")),
        (std::env::temp_dir(), format!("nvmfs-lab-mnt-{pid}-")),
    ] {
        let left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "left in {}: {left:?}", dir.display());
    }
    assert_eq!(live_resources(), Vec::<String>::new());
}

/// The /proc/mounts type and options of the mount must be as asked.
fn check_mounted(p: &Provisioned, expected_options: &[&str]) {
    let entry = resource::mount_entry(p.mount_point()).expect("mounted");
    let fields: Vec<&str> = entry.split_whitespace().collect();
    assert_eq!(fields[2], p.variant().fs_type, "{entry}");
    let options: Vec<&str> = fields[3].split(',').collect();
    for want in expected_options {
        assert!(options.contains(want), "{want} not in {entry}");
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
}

/// Create, write, read, remount, read, teardown; then nothing left.
fn round_trip(name: &str, expected_options: &[&str]) {
    let _serial = provisioning_turn();
    let Some(v) = runnable(name) else { return };
    let started = std::time::Instant::now();
    let mut p =
        Provisioned::create(&v, Path::new(SHM), SIZE).unwrap_or_else(|e| panic!("{name}: {e}"));
    let info = p.info();
    check_info(&v, &info);
    check_mounted(&p, expected_options);
    let file = p.mount_point().join("probe.bin");
    let data = pattern((1 << 20) + 123);
    fs::write(&file, &data).unwrap();
    assert!(fs::read(&file).unwrap() == data, "{name}: read back");
    let remounted = p
        .remount()
        .unwrap_or_else(|e| panic!("{name} remount: {e}"));
    assert_eq!(remounted, v.is_block_backed(), "{name}");
    assert!(
        fs::read(&file).unwrap() == data,
        "{name}: read after remount"
    );
    check_mounted(&p, expected_options);
    p.teardown()
        .unwrap_or_else(|e| panic!("{name} teardown: {e}"));
    assert_gone(&info);
    println!(
        "{name}: ok in {:?}, direct I/O {:?}, {:?}",
        started.elapsed(),
        info.direct_io,
        info.mkfs_version
    );
}

fn check_info(v: &Variant, info: &ProvisionInfo) {
    assert_eq!(info.variant, v.name);
    assert_eq!(info.size_bytes, SIZE);
    assert!(info
        .mount_command
        .starts_with(&format!("mount -t {}", v.fs_type)));
    assert_eq!(info.loop_device.is_some(), v.is_block_backed());
    assert_eq!(info.direct_io.is_some(), v.is_block_backed());
    if v.is_block_backed() {
        let mkfs = info.mkfs_command.as_deref().unwrap();
        assert!(
            mkfs.starts_with(&v.mkfs_args[0])
                && mkfs.ends_with(info.loop_device.as_deref().unwrap())
        );
        assert!(info.mkfs_version.is_some(), "{info:?}");
    }
    serde_json::to_string(info).unwrap();
}

macro_rules! round_trip_tests {
    ($($test:ident: $name:expr, [$($opt:expr),*];)*) => {
        $(
            #[test]
            fn $test() {
                round_trip(&$name, &[$($opt),*]);
            }
        )*
    };
}

round_trip_tests! {
    round_trip_ext2: "ext2", [];
    round_trip_ext3: "ext3", ["data=ordered"];
    round_trip_ext3_writeback: "ext3-writeback", ["data=writeback"];
    round_trip_ext3_journal: "ext3-journal", ["data=journal"];
    round_trip_ext4: "ext4", [];
    round_trip_ext4_nodelalloc: "ext4-nodelalloc", ["nodelalloc"];
    round_trip_xfs: "xfs", [];
    round_trip_xfs_high_agcount: format!("xfs-ag{}", xfs_high_agcount(SIZE)), [];
    round_trip_btrfs: "btrfs", [];
    round_trip_tmpfs: "tmpfs", ["size=524288k"];
}

#[test]
fn round_trip_f2fs_and_nilfs2_when_present() {
    let optional: Vec<Variant> = catalogue(SIZE)
        .into_iter()
        .filter(|v| ["f2fs", "nilfs2"].contains(&v.fs_type.as_str()))
        .collect();
    if optional.is_empty() {
        println!("skipped: no f2fs or nilfs2 on this machine");
    }
    for v in optional {
        let logs = v.mount_options.clone();
        round_trip(
            &v.name,
            &[logs.as_str()]
                .into_iter()
                .filter(|o| !o.is_empty())
                .collect::<Vec<_>>(),
        );
    }
}

#[test]
fn high_agcount_is_what_mkfs_made() {
    let _serial = provisioning_turn();
    let name = format!("xfs-ag{}", xfs_high_agcount(SIZE));
    let Some(v) = runnable(&name) else { return };
    if super::probe::program_path("xfs_info").is_none() {
        return println!("skipped: xfs_info not installed");
    }
    let p = Provisioned::create(&v, Path::new(SHM), SIZE).unwrap();
    let out = CommandLine::new("xfs_info", &[&p.mount_point().to_string_lossy()])
        .run()
        .unwrap();
    assert!(
        out.contains(&format!("agcount={}", xfs_high_agcount(SIZE))),
        "{out}"
    );
    p.teardown().unwrap();
}

#[test]
fn panicking_workload_still_cleans_up() {
    let _serial = provisioning_turn();
    let Some(v) = runnable("ext4") else { return };
    let mut info = None;
    let result = catch_unwind(AssertUnwindSafe(|| {
        let p = Provisioned::create(&v, Path::new(SHM), SIZE).unwrap();
        info = Some(p.info());
        fs::write(p.mount_point().join("half-done"), b"x").unwrap();
        let held_open = fs::File::open(p.mount_point().join("half-done")).unwrap();
        panic!("workload failed with {held_open:?} open");
    }));
    assert!(result.is_err());
    assert_gone(&info.expect("created"));
}

#[test]
fn failing_mkfs_leaves_nothing() {
    let _serial = provisioning_turn();
    let Some(mut v) = runnable("ext4") else {
        return;
    };
    v.mkfs_args.extend(["-O".into(), "no_such_feature".into()]);
    let e = Provisioned::create(&v, Path::new(SHM), SIZE)
        .err()
        .expect("bad mkfs option");
    let msg = e.to_string();
    assert!(
        msg.contains("`mkfs.ext4 -F")
            && msg.contains("no_such_feature")
            && msg.contains("exit status"),
        "{msg}"
    );
    assert_nothing_left();
}

#[test]
fn failing_mount_leaves_nothing() {
    let _serial = provisioning_turn();
    let Some(mut v) = runnable("ext4") else {
        return;
    };
    v.mount_options = "data=bogus".into();
    let e = Provisioned::create(&v, Path::new(SHM), SIZE)
        .err()
        .expect("bad mount option");
    assert!(
        e.to_string()
            .contains("`mount -t ext4 -o data=bogus /dev/loop"),
        "{e}"
    );
    assert_nothing_left();
}

#[test]
fn missing_shm_dir_is_a_clear_error() {
    let _serial = provisioning_turn();
    let Some(v) = runnable("ext2") else { return };
    let e = Provisioned::create(&v, Path::new("/nonexistent-nvmfs-shm"), SIZE)
        .err()
        .expect("no dir");
    assert!(e.to_string().contains("/nonexistent-nvmfs-shm"), "{e}");
    assert_nothing_left();
}

#[test]
fn concurrent_creates_get_their_own_devices() {
    let _serial = provisioning_turn();
    let (Some(a), Some(b)) = (runnable("ext2"), runnable("xfs")) else {
        return;
    };
    let made: Vec<Provisioned> = thread::scope(|s| {
        let ha = s.spawn(|| Provisioned::create(&a, Path::new(SHM), SIZE));
        let hb = s.spawn(|| Provisioned::create(&b, Path::new(SHM), SIZE));
        [ha, hb].map(|h| h.join().unwrap().unwrap()).into()
    });
    let infos: Vec<ProvisionInfo> = made.iter().map(Provisioned::info).collect();
    assert_ne!(infos[0].loop_device, infos[1].loop_device);
    assert_ne!(infos[0].mount_point, infos[1].mount_point);
    drop(made);
    for info in &infos {
        assert_gone(info);
    }
}

const CHILD_ENV: &str = "NVMFS_LAB_INTERRUPT_CHILD";

/// The child process of `second_interrupt_tears_down_and_exits`: a stuck
/// workload that notices the first signal but does not stop.
#[test]
#[ignore = "run by second_interrupt_tears_down_and_exits in a child process"]
fn interrupt_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    install_interrupt_handler().unwrap();
    let v = catalogue(SIZE).remove(0);
    let p = Provisioned::create(&v, Path::new(SHM), SIZE).unwrap();
    println!("CHILD READY {}", serde_json::to_string(&p.info()).unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut told = false;
    while std::time::Instant::now() < deadline {
        if interrupted() && !told {
            println!("CHILD INTERRUPTED");
            told = true;
        }
        thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(p);
}

/// Kills the child if the test fails half-way, so it does not linger.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// The rest of the first stdout line containing `marker`.
fn wait_for(lines: &mut impl Iterator<Item = std::io::Result<String>>, marker: &str) -> String {
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(at) = line.find(marker) {
            return line[at + marker.len()..].to_string();
        }
    }
    panic!("child ended before printing {marker:?}");
}

#[test]
fn second_interrupt_tears_down_and_exits() {
    let _serial = provisioning_turn();
    if runnable("ext2").is_none() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--exact",
            "kernel::tests::interrupt_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Reap(child);
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let info: serde_json::Value =
        serde_json::from_str(&wait_for(&mut lines, "CHILD READY ")).unwrap();
    signal(&child.0, libc::SIGINT);
    wait_for(&mut lines, "CHILD INTERRUPTED");
    signal(&child.0, libc::SIGINT);
    let status = child.0.wait().unwrap();
    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(INTERRUPT_EXIT_STATUS), "{stderr}");
    assert!(
        stderr.contains("interrupted again: removing 4 resource(s)"),
        "{stderr}"
    );
    let mp = Path::new(info["mount_point"].as_str().unwrap());
    let file = info["backing_file"].as_str().unwrap();
    assert!(!resource::is_mounted(mp) && !mp.exists(), "{stderr}");
    assert!(!Path::new(file).exists(), "{stderr}");
    let losetup = CommandLine::new("losetup", &["-a"]).run().unwrap();
    assert!(!losetup.contains(file), "{losetup}");
}

#[test]
fn open_file_blocks_remount_but_not_teardown() {
    let _serial = provisioning_turn();
    let Some(v) = runnable("ext4") else { return };
    let mut p = Provisioned::create(&v, Path::new(SHM), SIZE).unwrap();
    let path = p.mount_point().join("held");
    fs::write(&path, b"x").unwrap();
    let held = fs::File::open(&path).unwrap();
    let e = p.remount().expect_err("busy");
    assert!(e.to_string().contains("target is busy"), "{e}");
    assert!(
        resource::is_mounted(p.mount_point()),
        "a failed remount leaves it mounted"
    );
    let info = p.info();
    // umount -l succeeds, but the file system lives on with the open file
    // and holds the loop device: the kernel detaches it on the last close.
    let e = p.teardown().expect_err("loop device still held");
    assert!(e.to_string().contains("still attached"), "{e}");
    assert_eq!(live_resources(), Vec::<String>::new());
    drop(held);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let file = info.backing_file.clone().unwrap();
    while CommandLine::new("losetup", &["-a"])
        .run()
        .unwrap()
        .contains(&file)
        && std::time::Instant::now() < deadline
    {
        thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_gone(&info);
}
