//! Programs run under the preload library (`nvmfs run`), checked against expected results,
//! with `nvmfs fsck` of the image afterwards.
//!
//! The tests build the library and the `nvmfs` binary first (`cargo build -p nvmfs-preload
//! -p nvmfs-cli` in this test's profile and target directory: `cargo test` itself does not
//! build cdylibs). A C API checker (tests/c/api.c) is compiled with `cc` when a C compiler
//! exists; tests of third-party programs (sqlite3, fio, git, postmark, pjdfstest) skip with
//! a message when the program is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

struct Built {
    nvmfs: PathBuf,
    lib: PathBuf,
}

/// target/<profile> of this test binary (target/<profile>/deps/programs-*).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf()
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let dir = profile_dir();
        let target = dir.parent().expect("target dir").to_path_buf();
        let release = dir.file_name().is_some_and(|n| n == "release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args([
            "build",
            "-q",
            "-p",
            "nvmfs-preload",
            "-p",
            "nvmfs-cli",
            "--target-dir",
        ])
        .arg(&target);
        if release {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo build");
        assert!(
            st.success(),
            "cargo build of nvmfs-preload and nvmfs-cli failed"
        );
        let b = Built {
            nvmfs: dir.join("nvmfs"),
            lib: dir.join("libnvmfs_preload.so"),
        };
        assert!(b.nvmfs.is_file(), "{} missing", b.nvmfs.display());
        assert!(b.lib.is_file(), "{} missing", b.lib.display());
        b
    })
}

/// A fresh image in /dev/shm (removed on drop) and the prefix the test uses.
struct Img {
    dir: tempfile::TempDir,
    image: PathBuf,
    prefix: String,
}

fn image(name: &str, size: &str) -> Img {
    let b = built();
    let dir = tempfile::Builder::new()
        .prefix(&format!("nvmfs-preload-{name}-"))
        .tempdir_in(if Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })
        .expect("temp dir");
    let image = dir.path().join("img");
    let out = Command::new(&b.nvmfs)
        .args(["mkfs", "--size", size])
        .arg(&image)
        .output()
        .expect("nvmfs mkfs");
    assert!(
        out.status.success(),
        "mkfs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Writable by everyone: tests switch users, and the coordination file takes the
    // image's mode.
    std::fs::set_permissions(&image, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .expect("chmod image");
    Img {
        dir,
        image,
        prefix: format!("/nvmfs-test-{name}"),
    }
}

impl Img {
    fn cmd(&self, program: &[&str]) -> Command {
        let mut c = Command::new(&built().nvmfs);
        c.arg("run")
            .arg("--image")
            .arg(&self.image)
            .args(["--prefix", &self.prefix, "--"])
            .args(program)
            .env("P", &self.prefix)
            .env("NVMFS_QUIET", "1")
            .env("LC_ALL", "C");
        c
    }

    fn run(&self, program: &[&str]) -> Output {
        self.cmd(program).output().expect("nvmfs run")
    }

    /// Runs a bash script ($P is the prefix); returns stdout, failing on a non-zero exit.
    fn sh(&self, script: &str) -> String {
        let out = self.run(&["bash", "-c", &format!("set -e\n{script}")]);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "script failed ({}):\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// `nvmfs fsck` must find the image clean (and, with every process gone, marked clean).
    fn fsck(&self) {
        let out = Command::new(&built().nvmfs)
            .arg("fsck")
            .arg(&self.image)
            .output()
            .expect("nvmfs fsck");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.contains("clean"),
            "fsck: {text}"
        );
        if text.contains("not unmounted cleanly") {
            // Two processes that exit at the same moment can each see the other still
            // attached, and neither marks the image clean (the next attach recovers it);
            // the contents must be consistent all the same, which fsck checked.
            eprintln!("note: image left marked as in use (processes exited together)");
        }
    }

    #[allow(dead_code)]
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn skip(why: &str) {
    eprintln!("skipped: {why}");
}

#[test]
fn coreutils_round_trip() {
    let img = image("coreutils", "64M");
    let src = tempfile::tempdir().expect("src dir");
    let s = src.path().display().to_string();
    // A small real tree to copy in and out.
    let tree = Command::new("bash")
        .args(["-c", &format!(
            "set -e; cd {s}; mkdir -p t/a/b t/c; for i in $(seq 1 20); do seq 1 $((i*100)) > t/a/f$i; done; \
             head -c 100000 /dev/urandom > t/c/bin; ln -s a/f1 t/link; ln t/a/f2 t/hard; chmod 600 t/c/bin"
        )])
        .status()
        .expect("make tree");
    assert!(tree.success());
    let out = img.sh(&format!(
        "cp -a {s}/t $P/t
         diff -r {s}/t $P/t && echo same-after-copy-in
         cp -a $P/t {s}/back
         diff -r {s}/t {s}/back && echo same-after-copy-out
         ls $P/t | tr '\\n' ' '; echo
         stat -c '%n %s %h %a %F' $P/t/a/f3 $P/t/c/bin $P/t/hard
         readlink $P/t/link
         find $P/t | sort | wc -l
         du -s --apparent-size -B1 $P/t/c
         sort -r -o $P/sorted $P/t/a/f1 && head -3 $P/sorted
         mv $P/t/a/f20 $P/t/c/moved && test ! -e $P/t/a/f20 && wc -l < $P/t/c/moved
         touch -d '2001-02-03 04:05:06' $P/t/c/moved && date -r $P/t/c/moved +%Y%m%d
         chmod 751 $P/t/c && stat -c %a $P/t/c
         ln -s /etc $P/etc-link && test -d $P/etc-link/ && echo out-link-ok
         rm -r $P/t/a && ls $P/t | tr '\\n' ' '; echo
         df -B4096 $P | tail -1 | awk '{{print ($2 > 0)}}'"
    ));
    let expected = "same-after-copy-in
same-after-copy-out
a c hard link 
/nvmfs-test-coreutils/t/a/f3 1092 1 644 regular file
/nvmfs-test-coreutils/t/c/bin 100000 1 600 regular file
/nvmfs-test-coreutils/t/hard 692 2 644 regular file
a/f1
27
100000\t/nvmfs-test-coreutils/t/c
99
98
97
2000
20010203
751
out-link-ok
c hard link 
1
";
    assert_eq!(out, expected);
    img.fsck();
}

#[test]
fn shell_cwd_pipelines_and_redirections() {
    let img = image("shell", "64M");
    let out = img.sh("mkdir $P/d
         printf 'c\\nb\\na\\n' > $P/d/x
         cd $P/d && sort x > y && cat y
         pwd; /bin/pwd
         echo appended >> y; tail -1 y
         cat x | tr a-z A-Z | tee up > /dev/null; cat up | head -1
         exec 3> three; echo via-fd-3 >&3; exec 3>&-; cat three
         ( cd ..; pwd; ls )
         bash -c 'pwd; cat x | wc -l'
         cat < x | wc -l
         cd ..; pwd; cd ..; pwd
         cd $P/d/../d/./; pwd
         echo $(cat $P/d/three)
         (echo sub-shell > $P/d/sub); cat $P/d/sub
         cat /dev/stdin < $P/d/x | head -1
         test -f $P/d/x && test -d $P && test ! -e $P/none && echo tests-ok
         ls -d $P");
    let expected = "a
b
c
/nvmfs-test-shell/d
/nvmfs-test-shell/d
appended
C
via-fd-3
/nvmfs-test-shell
d
/nvmfs-test-shell/d
3
3
/nvmfs-test-shell
/
/nvmfs-test-shell/d
via-fd-3
sub-shell
c
tests-ok
/nvmfs-test-shell
";
    assert_eq!(out, expected);
    img.fsck();
}

#[test]
fn c_api_semantics() {
    if !have("cc") {
        return skip("no C compiler (cc): the C API checks need one");
    }
    let img = image("capi", "64M");
    let bin = tempfile::tempdir().expect("bin dir");
    let exe = bin.path().join("api");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/api.c");
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let exe_s = exe.display().to_string();
    let out = img.run(&[&exe_s, &img.prefix, &exe_s]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(" 0 failed"),
        "C API checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    img.fsck();
}

#[test]
fn read_only_mount() {
    let img = image("ro", "64M");
    img.sh("echo data > $P/f; mkdir $P/d");
    let out = Command::new(&built().nvmfs)
        .args(["run", "--ro", "--image"])
        .arg(&img.image)
        .args(["--prefix", &img.prefix, "--", "bash", "-c"])
        .arg("cat $P/f; echo x > $P/g 2>/dev/null || echo no-write; mkdir $P/e 2>/dev/null || echo no-mkdir; rm $P/f 2>/dev/null || echo no-rm; ls $P")
        .env("P", &img.prefix)
        .env("LC_ALL", "C")
        .output()
        .expect("run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "data\nno-write\nno-mkdir\nno-rm\nd\nf\n"
    );
    img.fsck();
}

#[test]
fn paths_outside_pass_through() {
    let img = image("pass", "64M");
    let real = tempfile::tempdir().expect("dir");
    let r = real.path().display().to_string();
    let out = img.sh(&format!(
        "echo real > {r}/f; cat {r}/f; cp {r}/f $P/f; cp $P/f {r}/g; cat {r}/g
         mkdir {r}/nvmfs-test-pass; echo decoy > {r}/nvmfs-test-pass/x; cat {r}/nvmfs-test-pass/x
         cd {r} && cat nvmfs-test-pass/x && cd / && ls $P"
    ));
    assert_eq!(out, "real\nreal\ndecoy\ndecoy\nf\n");
    assert_eq!(
        std::fs::read_to_string(real.path().join("g")).unwrap(),
        "real\n"
    );
    img.fsck();
}

#[test]
fn concurrent_processes() {
    let img = image("conc", "128M");
    // Four writers appending to one file and creating files in one directory at once.
    let out = img.sh("mkdir $P/d
         for w in 1 2 3 4; do
           ( for i in $(seq 1 200); do echo \"$w $i\" >> $P/log; echo $i > $P/d/w$w-$i; done ) &
         done
         wait
         wc -l < $P/log
         ls $P/d | wc -l
         for w in 1 2 3 4; do grep -c \"^$w \" $P/log; done
         cat $P/d/w3-150");
    assert_eq!(out, "800\n800\n200\n200\n200\n200\n150\n");
    img.fsck();
}

#[test]
fn sqlite_rollback_and_wal() {
    if !have("sqlite3") {
        return skip("sqlite3 not installed");
    }
    let img = image("sqlite", "128M");
    let out = img.sh(
        "for mode in delete wal; do
           db=$P/$mode.db
           sqlite3 $db \"pragma journal_mode=$mode; create table t(k integer primary key, v text);\" > /dev/null
           for w in 1 2; do
             ( for i in $(seq 1 50); do sqlite3 -cmd '.timeout 10000' $db \"insert into t(v) values('w$w-$i');\"; done ) &
           done
           wait
           sqlite3 $db 'pragma integrity_check; select count(*) from t; select count(distinct v) from t;'
         done",
    );
    assert_eq!(out, "ok\n100\n100\nok\n100\n100\n");
    img.fsck();
}

#[test]
fn fio_verify() {
    if !have("fio") {
        return skip("fio not installed");
    }
    let img = image("fio", "256M");
    for extra in [&["--numjobs=2"][..], &["--numjobs=2", "--thread"][..]] {
        let mut args = vec![
            "fio",
            "--name=v",
            "--directory",
            &img.prefix,
            "--ioengine=psync",
            "--rw=randwrite",
            "--bs=4k",
            "--size=8M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--group_reporting",
        ];
        args.extend_from_slice(extra);
        let out = img.run(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("err= 0"),
            "fio {extra:?}:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    img.fsck();
}

#[test]
fn git_repository() {
    if !have("git") {
        return skip("git not installed");
    }
    let img = image("git", "128M");
    let out = img.sh("cd $P && git init -q repo && cd repo
         git config user.email t@example.com && git config user.name t
         for i in $(seq 1 30); do echo $i > f$i; done; mkdir sub; echo s > sub/s
         git add -A && git commit -qm one
         echo more >> f1 && git mv f2 sub/f2 && git commit -qam two
         git fsck --strict 2>&1; git log --format=%s | tr '\\n' ' '; echo
         git status --porcelain | wc -l
         git gc -q && git fsck && git show HEAD:sub/f2");
    assert_eq!(out, "two one \n0\n2\n");
    img.fsck();
}

#[test]
fn postmark() {
    if !have("postmark") {
        return skip("postmark not installed");
    }
    let img = image("postmark", "128M");
    let out = img.sh(
        "mkdir $P/pm; printf 'set location '$P'/pm\\nset number 300\\nset transactions 1000\\nrun\\nquit\\n' | postmark > $P/pm.out
         grep -c 'Time:' $P/pm.out; ls $P/pm | wc -l",
    );
    assert_eq!(out, "1\n0\n");
    img.fsck();
}

/// pjdfstest cases that cannot pass through a preload library, by name fragment: sockets
/// (bind(2) creates them in the kernel's namespace), ETXTBSY (executing nvmfs files is not
/// possible), rmdir EBUSY (needs a mount on an nvmfs directory).
const PJDFSTEST_UNSUPPORTED: &[&str] = &["::socket", "::etxtbsy", "rmdir::ebusy"];

#[test]
fn pjdfstest_conformance() {
    if !have("pjdfstest") {
        return skip("pjdfstest not installed (cargo install pjdfstest --locked)");
    }
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        return skip("pjdfstest switches users: run as root");
    }
    let img = image("pjdfstest", "256M");
    let conf = img.dir.path().join("pjdfstest.toml");
    std::fs::write(
        &conf,
        "[features]\nposix_fallocate = {}\nrename_ctime = {}\nutime_now = {}\nutimensat = {}\n\n\
         [settings]\nnaptime = 0.01\nallow_remount = false\n\n\
         [dummy_auth]\nentries = [[\"nobody\", \"nogroup\"], [\"daemon\", \"daemon\"]]\n",
    )
    .expect("config");
    let second = tempfile::tempdir().expect("second dir");
    img.sh("mkdir -m 777 $P/t");
    let t = format!("{}/t", img.prefix);
    let out = img.run(&[
        "pjdfstest",
        "-c",
        conf.to_str().expect("utf-8"),
        "-p",
        &t,
        "-s",
        second.path().to_str().expect("utf-8"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_end().ends_with("FAILED"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let unexpected: Vec<&&str> = failed
        .iter()
        .filter(|n| !PJDFSTEST_UNSUPPORTED.iter().any(|u| n.contains(u)))
        .collect();
    let summary = text
        .lines()
        .find(|l| l.starts_with("Summary"))
        .unwrap_or("no summary");
    eprintln!("pjdfstest through the preload: {summary}");
    assert!(
        text.contains("Summary"),
        "pjdfstest did not finish:\n{text}"
    );
    assert!(
        unexpected.is_empty(),
        "pjdfstest failures: {unexpected:?}\n{summary}"
    );
    img.fsck();
}

/// The lab's `run:nvmfs` study target: each cell in a child under `nvmfs run`, relabelled,
/// beside the in-process nvmfs; nothing left in /dev/shm.
#[test]
fn study_runs_cells_under_nvmfs_run() {
    let b = built();
    let scratch = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("nvmfs-study-"))
            .collect();
        v.sort();
        v
    };
    let before = scratch(Path::new("/dev/shm"));
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(&b.nvmfs)
        .args([
            "study",
            "linux-2002",
            "--quick",
            "--target",
            "nvmfs",
            "--target",
            "run:nvmfs",
            "--workload",
            "pgmeter-oltp-o4",
            "--workload",
            "filemark-small-t4",
            "--trials",
            "2",
            "--seconds",
            "0.2",
            "--ops",
            "3000",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (target, status, mean) = (col("target"), col("status"), col("ops_per_sec_mean"));
    let mut seen = Vec::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let rate: f64 = f[mean].parse().unwrap_or(0.0);
        assert!(f[status] == "ok" && rate > 0.0, "{line}\n{stderr}");
        seen.push(format!("{}/{}", f[0], f[target]));
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "filemark-small-t4/nvmfs",
            "filemark-small-t4/run:nvmfs",
            "pgmeter-oltp-o4/nvmfs",
            "pgmeter-oltp-o4/run:nvmfs"
        ]
    );
    let raw = out.path().join("raw/pgmeter-oltp-o4--run_nvmfs.json");
    let raw = std::fs::read_to_string(raw).unwrap();
    assert!(
        raw.contains("study-cell JOB") && raw.contains("child_target"),
        "no record of the child: {raw}"
    );
    assert_eq!(scratch(Path::new("/dev/shm")), before, "scratch files left");
}
