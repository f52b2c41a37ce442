#!/usr/bin/env bash
# Real programs, unmodified, under `nvmfs run` (the LD_PRELOAD library serves every path under
# the prefix from an nvmfs image, in-process, several processes sharing one image): sqlite3,
# fio with verify, postmark, a tar round trip, coreutils, a bash pipeline, git, RocksDB's
# db_bench, several processes at once, a process SIGKILLed mid-write, and the exclusion between
# `nvmfs run` and `nvmfs mount`. `nvmfs fsck` checks the image after every step that writes.
# Each step prints PASS or FAIL; the last line is "N passed, M failed" and the exit status is
# non-zero if anything failed.
#
#   bash scripts/run-programs.sh [PATH/TO/nvmfs]      (default target/release/nvmfs; root)
#
# Builds nothing (`nvmfs run` finds libnvmfs_preload.so beside the binary). Installs sqlite3,
# fio, postmark, git, rocksdb-tools (db_bench) and fuse3 with apt-get when missing. The image
# (1 GiB) lives in /dev/shm and is removed on exit, also on failure.
#
# Environment: PREFIX (/nvmfs), SQLITE_ROWS (10000), FIO_SIZE (256M a job), FIO_JOBS (2),
# POSTMARK_NUMBER (2000), POSTMARK_TRANSACTIONS (5000), DB_BENCH_NUM (50000),
# CONC_LINES (300 lines a writer), KILL_ROUNDS (4), KILL_SECONDS (1, plus up to 1 at random),
# CMD_TIMEOUT (120: a program still running after that many seconds is killed and its step
# fails); STEPS="sqlite3 git ..." runs only those steps (setup and fsck-final always run);
# KEEP_LOGS=1 keeps the step logs. VIA=fuse runs the same steps directly on an `nvmfs mount`
# of the image at PREFIX instead of under `nvmfs run` (the FUSE mount as a reference: a step
# that passes there and fails under `nvmfs run` points at the preload; the conflict and
# read-only steps are skipped).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
nvmfs=${1:-target/release/nvmfs}
case $nvmfs in /*) ;; *) nvmfs="$PWD/$nvmfs" ;; esac
via=${VIA:-run}
cmd_timeout=${CMD_TIMEOUT:-120}

die() {
  printf 'run-programs: %s\n' "$*" >&2
  exit 2
}

case $via in run | fuse) ;; *) die "VIA must be run or fuse, not $via" ;; esac
[ "$(id -u)" = 0 ] || die "must run as root (installs packages, mounts FUSE for the conflict step)"
[ -x "$nvmfs" ] || die "nvmfs binary not found at $nvmfs (build it: cargo build --release)"
[ -d /dev/shm ] || die "/dev/shm is missing"
if [ "$via" = run ]; then
  "$nvmfs" run --help >/dev/null 2>&1 || die "$nvmfs has no 'run' command (nvmfs run is not built in)"
else
  [ -c /dev/fuse ] || die "VIA=fuse needs /dev/fuse"
fi

# --- tools ------------------------------------------------------------------------------
need=()
for p in sqlite3:sqlite3 fio:fio postmark:postmark git:git db_bench:rocksdb-tools \
  fusermount3:fuse3 python3:python3; do
  command -v "${p%%:*}" >/dev/null 2>&1 || need+=("${p#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (apt-get)"
  command -v apt-get >/dev/null 2>&1 || die "cannot install ${need[*]}: no apt-get on this machine; install them by hand"
  if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null); then
    die "cannot install ${need[*]} with apt-get (no network or no such package here); install them by hand"
  fi
  for p in sqlite3 fio postmark git db_bench python3; do
    command -v "$p" >/dev/null 2>&1 || die "$p is still missing after apt-get install"
  done
fi

# --- image, prefix, cleanup ---------------------------------------------------------------
work=$(mktemp -d /tmp/nvmfs-run-programs.XXXXXX)
img=$(mktemp -u /dev/shm/nvmfs-run-programs.XXXXXX.img)
logs="$work/logs"
mkdir -p "$logs"
if [ "$via" = run ]; then
  P=${PREFIX:-/nvmfs}
else
  P=${PREFIX:-$work/nvmfs}
fi
case $P in /*) ;; *) die "PREFIX must be an absolute path" ;; esac
P=${P%/}
export P
# Mount point of the conflict step (`nvmfs mount` of the image while `nvmfs run` holds it).
cmnt="$work/conflict-mnt"
created_prefix=0

# The processes a step starts in the background, killed with their children when the step
# ends (each step runs in a subshell with its own list).
bg_pids=()

# kill_tree PID: SIGKILLs PID and every process below it (nvmfs run may wait for its program).
kill_tree() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    kill_tree "$child"
  done
  kill -9 "$1" 2>/dev/null || true
}

kill_background() {
  local pid
  for pid in "${bg_pids[@]}"; do
    kill_tree "$pid"
  done
  bg_pids=()
}

# nv PROGRAM ARGS...: runs PROGRAM on the image, its paths under $P served by nvmfs. A program
# that hangs is killed after CMD_TIMEOUT seconds (exit 124), so a hang fails its step instead
# of the whole run.
nv() {
  local rc=0
  if [ "$via" = run ]; then
    timeout --foreground -k 10 "$cmd_timeout" "$nvmfs" run --image "$img" --prefix "$P" -- "$@" || rc=$?
  else
    timeout --foreground -k 10 "$cmd_timeout" "$@" || rc=$?
  fi
  if [ "$rc" = 124 ]; then
    echo "nv: killed after ${cmd_timeout} s (CMD_TIMEOUT): $*" >&2
  fi
  return "$rc"
}

# The coordination file of the image's shared mounts, removed by the last process to detach.
coord_file() {
  local dev ino
  read -r dev ino < <(stat -c '%d %i' "$img")
  printf '/dev/shm/nvmfs-%x-%x.coord' "$dev" "$ino"
}

is_mounted() { mountpoint -q "$1" 2>/dev/null; }

# Waits until no process holds the image's flock (a FUSE daemon after unmount).
wait_released() {
  flock -x -w "${1:-60}" "$img" true 2>/dev/null
}

fuse_unmount() { # DIR
  is_mounted "$1" || return 0
  umount "$1" 2>/dev/null || fusermount3 -u "$1" 2>/dev/null || umount -l "$1" || return 1
  wait_released 60 || {
    echo "image still held 60 s after unmount" >&2
    return 1
  }
}

fuse_mount() { # DIR
  "$nvmfs" mount "$img" "$1" && is_mounted "$1"
}

cleanup() {
  local rc=$?
  set +e
  cd /
  for d in "$cmnt" "$P"; do
    if is_mounted "$d"; then
      umount "$d" 2>/dev/null || fusermount3 -u "$d" 2>/dev/null || umount -l "$d" 2>/dev/null || fusermount3 -u -z "$d"
      [ -e "$img" ] && wait_released 30
    fi
  done
  [ "$created_prefix" = 1 ] && rmdir "$P" 2>/dev/null
  if [ -e "$img" ]; then
    local coord
    coord=$(coord_file)
    rm -rf "$img" "$coord" "$coord".d* "$coord.locks"
  fi
  if [ "${KEEP_LOGS:-0}" = 1 ]; then
    echo "logs kept in $logs"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

passed=0
failed=0
failures=()

# run_step NAME FUNCTION: runs FUNCTION in a subshell with errexit, its output indented and
# kept in $logs/NAME.log, and prints PASS or FAIL with the time taken.
run_step() {
  local name=$1 fn=$2 rc start end
  case " setup fsck-final ${STEPS:-$name} " in
    *" $name "*) ;;
    *) return 0 ;;
  esac
  printf '\n==> %s\n' "$name"
  start=$(date +%s.%N)
  set +e
  (
    set -euo pipefail
    trap kill_background EXIT
    cd "$work"
    "$fn"
  ) 2>&1 | tee "$logs/$name.log" | sed -u 's/^/    /'
  rc=${PIPESTATUS[0]}
  set -e
  end=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1))
    printf 'PASS %s (%s s)\n' "$name" "$secs"
  else
    failed=$((failed + 1))
    failures+=("$name")
    printf 'FAIL %s (exit %s, %s s)\n' "$name" "$rc" "$secs"
    # What a failed step left must not fill the image for the next (best effort: the
    # failure may be the very thing that breaks this).
    nv rm -rf "$P/$name" >/dev/null 2>&1 || true
  fi
}

# check_image: every process has let go of the image (its coordination file is gone), the last
# one marked it clean, and nvmfs fsck finds nothing. (VIA=fuse: unmount, fsck, mount again.)
check_image() {
  if [ "$via" = fuse ]; then
    fuse_unmount "$P"
    "$nvmfs" fsck "$img" | sed 's/^/fsck: /'
    fuse_mount "$P"
    return
  fi
  local coord clean bad=0
  coord=$(coord_file)
  if [ -e "$coord" ]; then
    echo "coordination file $coord still exists after the last process ended: it did not detach"
    bad=1
  fi
  if compgen -G "$coord.d*" >/dev/null; then
    echo "description files $coord.d* still exist after the last process ended"
    bad=1
  fi
  clean=$("$nvmfs" info --json "$img" | python3 -c 'import json, sys; print(json.load(sys.stdin)["clean"])')
  if [ "$clean" != True ]; then
    echo "image not marked clean after the last process ended"
    bad=1
  fi
  "$nvmfs" fsck "$img" 2>&1 | sed 's/^/fsck: /'
  [ "${PIPESTATUS[0]}" = 0 ] && [ "$bad" = 0 ]
}

# --- steps --------------------------------------------------------------------------------

step_setup() {
  "$nvmfs" --version 2>/dev/null || true
  "$nvmfs" mkfs --size 1G "$img"
  if [ "$via" = fuse ]; then
    fuse_mount "$P"
    grep " $P " /proc/mounts
  fi
  nv ls -la "$P"
  check_image
}

sqlite_fill() { # DB ROWS JOURNAL_MODE
  local db=$1 rows=$2 mode=$3 per=100
  {
    echo "PRAGMA journal_mode=$mode;"
    echo "CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB NOT NULL, n INTEGER);"
    echo "CREATE INDEX t_k ON t(k);"
    awk -v rows="$rows" -v per="$per" 'BEGIN {
      for (i = 1; i <= rows; i++) {
        if ((i - 1) % per == 0) print "BEGIN;"
        printf "INSERT INTO t(id, k, v, n) VALUES (%d, %c%08x-key%c, randomblob(%d), %d);\n", i, 39, i * 2654435761 % 4294967296, 39, 16 + i % 300, i
        if (i % per == 0 || i == rows) print "COMMIT;"
      }
    }'
  } | nv sqlite3 -bail "$db" >/dev/null
}

sqlite_check() { # DB ROWS
  local db=$1 rows=$2 out
  out=$(nv sqlite3 -bail "$db" "PRAGMA integrity_check; SELECT count(*), sum(n), count(DISTINCT k) FROM t;")
  echo "$db: $(echo "$out" | tr '\n' ' ')"
  [ "$(echo "$out" | sed -n 1p)" = ok ] || {
    echo "integrity_check failed: $out"
    return 1
  }
  local want_sum=$((rows * (rows + 1) / 2))
  [ "$(echo "$out" | sed -n 2p)" = "$rows|$want_sum|$rows" ] || {
    echo "expected $rows|$want_sum|$rows rows|sum|distinct keys"
    return 1
  }
}

step_sqlite() {
  local rows=${SQLITE_ROWS:-10000} t0 t1 mode
  local d="$P/sqlite3"
  nv mkdir "$d"
  for mode in DELETE WAL; do
    t0=$(date +%s.%N)
    sqlite_fill "$d/$mode.db" "$rows" "$mode"
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" -v r="$rows" -v m="$mode" 'BEGIN { printf "journal_mode=%s: %d rows in %d transactions, %.2f s (%.0f tx/s)\n", m, r, r / 100, b - a, r / 100 / (b - a) }'
  done
  # Each check is a new process: the databases are reopened from the image.
  sqlite_check "$d/DELETE.db" "$rows"
  sqlite_check "$d/WAL.db" "$rows"
  # An update and a delete in WAL mode, read back by another process.
  nv sqlite3 -bail "$d/WAL.db" "UPDATE t SET n = n + 1 WHERE id <= 100; DELETE FROM t WHERE id > $rows - 10;"
  [ "$(nv sqlite3 -bail "$d/WAL.db" "SELECT count(*), sum(n) FROM t WHERE id <= 100;")" = "100|5150" ]
  [ "$(nv sqlite3 -bail "$d/WAL.db" "SELECT count(*) FROM t;")" = "$((rows - 10))" ]
  [ "$(nv sqlite3 -bail "$d/WAL.db" "PRAGMA integrity_check;")" = ok ]
  nv ls -l "$d"
  # No journal left behind; the WAL is checkpointed and removed by the last close.
  [ -z "$(nv ls "$d" | grep -E 'journal|-wal$|-shm$' || true)" ] || {
    echo "sqlite left journal files"
    return 1
  }
  check_image
  echo "after fsck, in a new process:"
  sqlite_check "$d/DELETE.db" "$rows"
}

fio_verify() { # NAME EXTRA-ARGS...
  local name=$1 size=${FIO_SIZE:-256M} jobs=${FIO_JOBS:-2} rc=0 dir="$P/fio-verify"
  shift
  # Each job has its own file: it writes half of it at random 4 KiB offsets (mixed with
  # reads), then reads back and checks every block written (crc32c in a header of each block).
  nv fio --name="$name" --directory="$dir" --size="$size" --numjobs="$jobs" --group_reporting \
    --rw=randrw --bs=4k "$@" \
    --ioengine=psync --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 --randseed=1234 \
    --output-format=json --output="$work/fio-$name.json" 2>"$work/fio-$name.err" || rc=$?
  cat "$work/fio-$name.err"
  [ -s "$work/fio-$name.json" ] || {
    echo "fio wrote no report (exit $rc)"
    return 1
  }
  python3 - "$work/fio-$name.json" "$jobs" <<'PY'
import json, sys
try:
    jobs = json.load(open(sys.argv[1]))["jobs"]
    job = jobs[0]
except (ValueError, KeyError, IndexError) as e:
    sys.exit(f"fio's JSON report is unreadable: {e}")
mib = 1 << 20
r, w = job["read"], job["write"]
o = job["job options"]
print(f"fio {job['jobname']} rw={o['rw']} bs={o['bs']} size={o['size']} numjobs={o.get('numjobs', 1)} "
      f"verify={o['verify']}: error={job['error']}")
print(f"  write {w['io_bytes'] / mib:.0f} MiB at {w['bw_bytes'] / mib:.1f} MiB/s ({w['iops']:.0f} IOPS)")
print(f"  read (incl. verify) {r['io_bytes'] / mib:.0f} MiB at {r['bw_bytes'] / mib:.1f} MiB/s ({r['iops']:.0f} IOPS)")
if job["error"]:
    sys.exit(1)
if w["io_bytes"] == 0 or r["io_bytes"] < w["io_bytes"]:
    sys.exit("fio verified less than it wrote")
PY
  [ "$rc" = 0 ] || {
    echo "fio exited $rc"
    return 1
  }
  if grep -Eiq 'verify|bad magic|crc32c|wanted' "$work/fio-$name.err"; then
    echo "fio reported verify errors"
    return 1
  fi
  echo "fio $name: exit 0, no verify errors"
}

step_fio() {
  nv mkdir "$P/fio-verify"
  # Jobs as threads of one process, then as forked processes (fork without exec: the child
  # inherits the parent's attachment to the image).
  fio_verify threads --thread
  check_image
  nv bash -c 'rm "$1"/threads.*' _ "$P/fio-verify"
  fio_verify processes
  nv ls -l "$P/fio-verify"
  check_image
  nv rm -r "$P/fio-verify"
}

postmark_config() { # DIR NAME: writes $work/postmark-NAME.cfg for a run in DIR
  cat >"$work/postmark-$2.cfg" <<EOF
set location $1
set number ${POSTMARK_NUMBER:-2000}
set transactions ${POSTMARK_TRANSACTIONS:-5000}
set size 500 10000
set subdirectories 10
set seed 42
show
run
quit
EOF
}

# postmark's counts without the rates: they depend only on the configuration and the seed.
postmark_counts() {
  sed -n '/^Files:/,$p' "$1" | sed -E 's/ \([0-9.]+( [a-z]+)? per second\)//'
}

step_postmark() {
  local ref="$work/postmark-ref"
  mkdir -p "$ref"
  nv mkdir "$P/postmark"
  postmark_config "$P/postmark" nvmfs
  nv postmark "$work/postmark-nvmfs.cfg" </dev/null >"$work/postmark.out" 2>&1
  cat "$work/postmark.out"
  # postmark exits 0 even when its operations fail: it reports them as "Error: ...".
  if grep -q 'Error' "$work/postmark.out"; then
    echo "postmark reported errors"
    return 1
  fi
  grep -q 'Deleting subdirectories...Done' "$work/postmark.out"
  python3 - "$work/postmark.out" "${POSTMARK_NUMBER:-2000}" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
def n(pat):
    m = re.search(pat, t)
    if not m:
        sys.exit(f"postmark output lacks {pat!r}")
    return int(m.group(1))
number = int(sys.argv[2])
created, alone_c = n(r"(\d+) created"), n(r"Creation alone: (\d+) files")
mixed_c, deleted = n(r"Mixed with transactions: (\d+) files"), n(r"(\d+) deleted")
alone_d = n(r"Deletion alone: (\d+) files")
mixed_d = [int(x) for x in re.findall(r"Mixed with transactions: (\d+) files", t)][1]
ok = (alone_c == number and created == alone_c + mixed_c and deleted == alone_d + mixed_d
      and created == deleted)
print(f"counts: created {created} = {alone_c} + {mixed_c}, deleted {deleted} = {alone_d} + {mixed_d}: "
      + ("consistent" if ok else "INCONSISTENT"))
sys.exit(0 if ok else 1)
PY
  # The same configuration and seed on a kernel directory must give the same counts.
  postmark_config "$ref" ref
  postmark "$work/postmark-ref.cfg" </dev/null >"$work/postmark-ref.out" 2>&1
  if ! diff <(postmark_counts "$work/postmark-ref.out") <(postmark_counts "$work/postmark.out"); then
    echo "postmark's counts differ from the same run on $ref (above: < kernel, > nvmfs)"
    return 1
  fi
  echo "counts identical to the same run on a kernel directory"
  # postmark deletes what it made; the directory must be empty again.
  [ -z "$(nv find "$P/postmark" -mindepth 1 -maxdepth 1 | head -1)" ] || {
    echo "postmark left files behind"
    return 1
  }
  rm -rf "$ref"
  check_image
}

# A sha256 manifest of DIR (every regular file, symlink target, directory and mode, sorted),
# run with the program given: nv or nothing.
manifest() { # [nv] DIR
  local run=()
  [ "$1" = nv ] && {
    run=(nv)
    shift
  }
  "${run[@]}" bash -c 'cd "$1" && find . -mindepth 1 \( -type f -printf "f %p %m %s\n" -o -type l -printf "l %p %l\n" -o -type d -printf "d %p %m\n" \) | LC_ALL=C sort && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum' _ "$1"
}

step_tar() {
  local src="$work/tar-src" out="$work/tar-out"
  mkdir -p "$src" "$out"
  # The repository's crates/ and docs, and /usr/share/doc (thousands of small files and
  # symlinks).
  tar -C "$repo" -cf - crates docs README.md | tar -C "$src" -xf -
  if [ -d /usr/share/doc ]; then
    tar -C /usr/share -cf - doc 2>/dev/null | tar -C "$src" -xf - || true
  fi
  echo "source: $(find "$src" -type f | wc -l) files, $(find "$src" -type l | wc -l) symlinks, $(du -sh "$src" | cut -f1)"
  nv mkdir "$P/tar-roundtrip"
  # Into nvmfs by a tar under nvmfs run reading an archive from a pipe, back out by another
  # writing one to a pipe; and an archive file made inside nvmfs.
  tar -C "$src" -cf - . | nv tar -C "$P/tar-roundtrip" -xpf -
  nv tar -C "$P/tar-roundtrip" -cf - . | tar -C "$out" -xpf -
  nv tar -C "$P/tar-roundtrip" -cf "$P/back.tar" .
  # sha256sum inside nvmfs and of the bytes read out through a pipe agree.
  [ "$(nv sha256sum "$P/back.tar" | cut -d' ' -f1)" = "$(nv cat "$P/back.tar" | sha256sum | cut -d' ' -f1)" ]
  diff -r --no-dereference "$src" "$out"
  manifest "$src" >"$work/m-src"
  manifest nv "$P/tar-roundtrip" >"$work/m-nvmfs"
  manifest "$out" >"$work/m-out"
  cmp "$work/m-src" "$work/m-nvmfs" || {
    diff "$work/m-src" "$work/m-nvmfs" | head -20
    return 1
  }
  cmp "$work/m-src" "$work/m-out"
  echo "sha256 manifests of source, nvmfs copy and copy back identical: $(grep -c '^f ' "$work/m-src") files, manifest $(sha256sum <"$work/m-src" | cut -c1-16)"
  nv rm "$P/back.tar"
  rm -rf "$src" "$out"
  check_image
}

step_coreutils() {
  local d="$P/coreutils" src="$work/cu-src" out
  mkdir -p "$src/sub/deeper"
  printf 'alpha\n' >"$src/a.txt"
  seq 1 5000 | shuf --random-source=<(yes) >"$src/sub/numbers"
  head -c 300000 /dev/urandom >"$src/sub/deeper/blob"
  ln -s ../a.txt "$src/sub/link"
  chmod 640 "$src/a.txt"
  touch -d '2001-02-03 04:05:06' "$src/sub/numbers"
  nv mkdir "$d"
  # cp -a into nvmfs keeps modes, times and symlinks.
  nv cp -a "$src" "$d/tree"
  out=$(nv stat -c '%a %s %Y' "$d/tree/a.txt" "$d/tree/sub/numbers")
  echo "$out"
  [ "$out" = "$(stat -c '%a %s %Y' "$src/a.txt" "$src/sub/numbers")" ]
  nv ls -lR "$d/tree" | head -20
  [ "$(nv readlink "$d/tree/sub/link")" = ../a.txt ]
  [ "$(nv cat "$d/tree/sub/link")" = alpha ]
  cmp <(nv cat "$d/tree/sub/deeper/blob") "$src/sub/deeper/blob"
  # find, du
  [ "$(nv find "$d/tree" -type f | LC_ALL=C sort | sed "s|^$d/tree||")" = "$(find "$src" -type f | LC_ALL=C sort | sed "s|^$src||")" ]
  [ "$(nv find "$d/tree" -name 'num*' -newer "$d/tree/a.txt" | wc -l)" = 0 ]
  out=$(nv du -s --apparent-size -B1 "$d/tree" | cut -f1)
  echo "du --apparent-size: $out (source $(du -s --apparent-size -B1 "$src" | cut -f1))"
  [ "$(nv du -s -b "$d/tree/sub/deeper" | cut -f1)" -ge 300000 ]
  # sort -o in place, inside nvmfs
  nv sort -n -o "$d/tree/sub/numbers" "$d/tree/sub/numbers"
  cmp <(nv cat "$d/tree/sub/numbers") <(seq 1 5000)
  # touch, chmod, stat
  nv touch -d '2010-10-10 10:10:10' "$d/tree/a.txt"
  nv chmod 600 "$d/tree/a.txt"
  [ "$(nv stat -c '%a %Y' "$d/tree/a.txt")" = "600 $(date -d '2010-10-10 10:10:10' +%s)" ]
  nv touch "$d/new-empty"
  [ "$(nv stat -c '%s %F' "$d/new-empty")" = "0 regular empty file" ]
  # ln -s, readlink -f across a relative link, mv (rename, and into another directory)
  nv ln -s tree/sub "$d/sublink"
  [ "$(nv readlink -f "$d/sublink/link")" = "$d/tree/a.txt" ]
  nv mv "$d/tree/sub/numbers" "$d/sorted"
  nv mv "$d/tree/sub" "$d/moved-sub"
  [ "$(nv readlink "$d/sublink")" = tree/sub ]
  nv test ! -e "$d/sublink/link"
  [ "$(nv head -3 "$d/sorted" | tr '\n' ' ')" = "1 2 3 " ]
  nv ls -l "$d" "$d/moved-sub"
  # rm -r
  nv rm -r "$d/moved-sub" "$d/tree"
  [ "$(nv ls "$d" | tr '\n' ' ')" = "new-empty sorted sublink " ]
  echo "cp -a, ls, find, du, sort -o, stat, touch, chmod, ln -s, readlink, mv, rm -r: ok"
  rm -rf "$src"
  check_image
}

step_shell() {
  # One bash under nvmfs run: cd into nvmfs, relative paths, redirections, pipes (each side
  # its own process), subshells, command substitution, here-documents, a loop.
  nv bash -c '
    set -euo pipefail
    mkdir "$P/shell"
    cd "$P/shell"
    [ "$(pwd)" = "$P/shell" ]
    seq 1 1000 > numbers
    echo one > log
    echo two >> log
    (echo three; echo four) >> log
    { echo five; } >> log
    [ "$(wc -l < log)" = 5 ]
    [ "$(cat "$P/shell/log" | head -1)" = one ]
    sort -rn < numbers | head -3 > top3
    [ "$(cat top3 | tr "\n" " ")" = "1000 999 998 " ]
    mkdir -p sub/dir && cd sub/dir
    awk "{ s += \$1 } END { print s }" ../../numbers > sum
    [ "$(cat sum)" = 500500 ]
    cd ../..
    [ "$(cat sub/dir/sum)" = "$(cat "$P/shell/sub/dir/sum")" ]
    x=$(cat "$P/shell/sub/dir/sum")
    [ "$x" = 500500 ]
    ( cd sub && echo "from a subshell in $(pwd)" > note ) 
    [ "$(cat sub/note)" = "from a subshell in $P/shell/sub" ]
    cat <<EOF > heredoc
line $x
EOF
    [ "$(cat heredoc)" = "line 500500" ]
    for i in $(seq 1 50); do echo "$i" >> loop; done
    [ "$(wc -l < loop)" = 50 ]
    grep -c . numbers | tee count > /dev/null
    [ "$(< count)" = 1000 ]
    exec 3> fd3
    echo via fd 3 >&3
    exec 3>&-
    [ "$(< fd3)" = "via fd 3" ]
    cat numbers | gzip -1 | gunzip | md5sum > numbers.md5
    [ "$(cut -d" " -f1 numbers.md5)" = "$(md5sum < numbers | cut -d" " -f1)" ]
    ls -1 | sort | tr "\n" " "; echo
    rm -r "$P/shell"
    echo "shell: ok"
  '
  nv test ! -e "$P/shell"
  check_image
}

step_git() {
  local g=(git -c user.name="nvmfs CI" -c user.email="ci@nvmfs.invalid" -c init.defaultBranch=main
    -c safe.directory='*' -c gc.auto=0)
  export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
  nv mkdir "$P/git"
  nv "${g[@]}" init -q "$P/git/repo"
  tar -C "$repo" -cf - crates/cli docs README.md | nv tar -C "$P/git/repo" -xf -
  nv "${g[@]}" -C "$P/git/repo" add -A
  nv "${g[@]}" -C "$P/git/repo" commit -q -m "import"
  nv bash -c 'echo "// change" >> "$1/README.md"' _ "$P/git/repo"
  nv "${g[@]}" -C "$P/git/repo" mv docs documentation
  nv "${g[@]}" -C "$P/git/repo" commit -q -a -m "second"
  nv "${g[@]}" -C "$P/git/repo" fsck --full --strict
  nv "${g[@]}" -C "$P/git/repo" gc -q
  nv "${g[@]}" -C "$P/git/repo" fsck --full --strict
  nv "${g[@]}" -C "$P/git/repo" log --oneline | cat
  [ "$(nv "${g[@]}" -C "$P/git/repo" rev-list --count HEAD)" = 2 ]
  [ -z "$(nv "${g[@]}" -C "$P/git/repo" status --porcelain)" ]
  nv "${g[@]}" clone -q "$P/git/repo" "$P/git/clone"
  nv "${g[@]}" -C "$P/git/clone" checkout -q HEAD~1
  nv test -d "$P/git/clone/docs"
  nv test ! -e "$P/git/clone/documentation"
  echo "git: $(nv "${g[@]}" -C "$P/git/repo" ls-files | wc -l) files, 2 commits, fsck clean, clone checked out"
  check_image
}

db_bench_count() { # OUTPUT-FILE BENCHMARK -> "OPS FOUND" (FOUND empty for readseq)
  sed -nE "s/^$2 +:.* ([0-9]+) operations;.*MB\/s( \(([0-9]+) of [0-9]+ found\))?.*/\1 \3/p" "$1" | tail -1
}

step_db_bench() {
  local num=${DB_BENCH_NUM:-50000} ref="$work/db_bench-ref" run f
  local args=(--num="$num" --seed=1)
  nv mkdir "$P/db_bench"
  nv db_bench --db="$P/db_bench/db" --benchmarks=fillrandom,readrandom "${args[@]}" \
    >"$work/db1.out" 2>"$work/db1.err"
  # Reopened by a new process. (readrandom's keys depend on --seed and on how many benchmark
  # threads ran before it in the process, so it comes second here as above.)
  nv db_bench --db="$P/db_bench/db" --use_existing_db=1 --benchmarks=readseq,readrandom "${args[@]}" \
    >"$work/db2.out" 2>"$work/db2.err"
  grep -hE '^(fillrandom|readrandom|readseq) ' "$work/db1.out" "$work/db2.out"
  if grep -Eiq 'error|corrupt|fail' "$work/db1.out" "$work/db2.out" "$work/db1.err" "$work/db2.err"; then
    grep -Ei 'error|corrupt|fail' "$work/db1.out" "$work/db2.out" "$work/db1.err" "$work/db2.err" | head
    echo "db_bench reported errors"
    return 1
  fi
  # The same runs on a kernel directory: the counts depend only on --num and --seed.
  mkdir -p "$ref"
  db_bench --db="$ref/db" --benchmarks=fillrandom,readrandom "${args[@]}" >"$work/db1-ref.out" 2>/dev/null
  db_bench --db="$ref/db" --use_existing_db=1 --benchmarks=readseq,readrandom "${args[@]}" \
    >"$work/db2-ref.out" 2>/dev/null
  rm -rf "$ref"
  for run in db1:readrandom db2:readseq db2:readrandom; do
    f=${run%%:*}
    local got want
    got=$(db_bench_count "$work/$f.out" "${run#*:}")
    want=$(db_bench_count "$work/$f-ref.out" "${run#*:}")
    echo "${run#*:} ($f): ops and keys found: nvmfs '$got', kernel directory '$want'"
    [ -n "$got" ] && [ "$got" = "$want" ] || {
      echo "db_bench's counts differ from the kernel directory's"
      return 1
    }
  done
  read -r _ f < <(db_bench_count "$work/db1.out" readrandom)
  # fillrandom draws keys with repeats: about 1 - 1/e of them exist.
  [ "$f" -gt $((num / 2)) ]
  nv ls -l "$P/db_bench/db"
  check_image
}

# Writer I of a concurrency round: appends L lines to the shared log with >>, writes and reads
# back files of its own, replaces one by rename, and reads the shared log as it grows.
conc_writer='
  set -euo pipefail
  i=$1; L=$2; d=$3
  for ((j = 1; j <= L; j++)); do
    echo "w$i $j" >> "$d/shared.log"
    printf "%s %s\n" "$i" "$j" > "$d/own.$i.$j"
    read -r a b < "$d/own.$i.$j"
    [ "$a $b" = "$i $j" ] || { echo "writer $i: own.$i.$j holds \"$a $b\""; exit 1; }
    if (( j % 10 == 0 )); then
      printf "%s\n" "$j" > "$d/state.$i.tmp"
      mv "$d/state.$i.tmp" "$d/state.$i"
      n=$(wc -l < "$d/shared.log")
      (( n >= j )) || { echo "writer $i: shared.log has $n lines after my $j"; exit 1; }
    fi
    if (( j > 20 )); then rm "$d/own.$i.$((j - 20))"; fi
  done
'

# A reader of a concurrency round: while the writers run, every line it sees in the shared log
# is whole, and the log never shrinks.
conc_reader='
  set -euo pipefail
  d=$1; stop=$2; last=0; reads=0
  while [ ! -e "$stop" ]; do
    if [ -e "$d/shared.log" ]; then
      n=$(grep -cvE "^w[0-9]+ [0-9]+$" "$d/shared.log" || true)
      [ "$n" = 0 ] || { echo "reader: $n malformed lines"; exit 1; }
      c=$(wc -l < "$d/shared.log")
      (( c >= last )) || { echo "reader: shared.log shrank from $last to $c lines"; exit 1; }
      last=$c; reads=$((reads + 1))
    fi
  done
  echo "reader: $reads reads, last saw $last lines"
'

conc_round() { # N
  local n=$1 lines=${CONC_LINES:-300} d="$P/concurrent/n$1" i pids=() rpid rc=0
  local stop="$work/stop-reader-$n"
  nv mkdir -p "$d"
  rm -f "$stop"
  nv bash -c "$conc_reader" _ "$d" "$stop" &
  rpid=$!
  bg_pids+=("$rpid")
  for ((i = 1; i <= n; i++)); do
    nv bash -c "$conc_writer" _ "$i" "$lines" "$d" &
    pids+=($!)
    bg_pids+=($!)
  done
  for i in "${pids[@]}"; do
    wait "$i" || rc=1
  done
  touch "$stop"
  wait "$rpid" || rc=1
  [ "$rc" = 0 ] || {
    echo "$n writers: a writer or the reader failed"
    return 1
  }
  # Exactly N x L lines, each writer's in order; each writer's last 20 own files and its
  # state file; nothing else.
  nv python3 - "$d" "$n" "$lines" <<'PY'
import os, sys
d, n, lines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
got = open(os.path.join(d, "shared.log")).read().splitlines()
assert len(got) == n * lines, f"shared.log: {len(got)} lines, want {n} x {lines} = {n * lines}"
seen = {}
for line in got:
    w, j = line.split()
    want = seen.get(w, 0) + 1
    assert int(j) == want, f"{w}: line {j} where {want} was due"
    seen[w] = want
assert sorted(seen) == sorted(f"w{i}" for i in range(1, n + 1)), seen
names = sorted(os.listdir(d))
want = sorted(["shared.log"] + [f"state.{i}" for i in range(1, n + 1)]
              + [f"own.{i}.{j}" for i in range(1, n + 1) for j in range(lines - 19, lines + 1)])
assert names == want, f"directory: {len(names)} entries, want {len(want)}; extra {set(names) - set(want)}, missing {set(want) - set(names)}"
for i in range(1, n + 1):
    assert open(os.path.join(d, f"state.{i}")).read() == f"{lines}\n"
    for j in range(lines - 19, lines + 1):
        assert open(os.path.join(d, f"own.{i}.{j}")).read() == f"{i} {j}\n"
print(f"{n} writers: shared.log has exactly {n} x {lines} lines, each writer's in order; "
      f"{len(names)} entries as expected")
PY
}

step_concurrent() {
  conc_round 2
  check_image
  conc_round 4
  check_image
  nv rm -r "$P/concurrent"
}

# The victim of the kill step: overwrites a 32 MiB file in 64 KiB records for ever, record i of
# pass g holding (i, g) throughout, so that every record read back later is whole or the one
# the process was writing when it died.
victim_py='
import os, struct, sys
path, pidfile = sys.argv[1], sys.argv[2]
REC, N = 65536, 512
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
with open(pidfile + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(pidfile + ".tmp", pidfile)
g = 0
while True:
    g += 1
    for i in range(N):
        os.pwrite(fd, struct.pack("<QQ", i, g) * (REC // 16), i * REC)
'

victim_check_py='
import os, struct, sys
REC = 65536
data = open(sys.argv[1], "rb").read()
bad, gens = [], set()
for i in range(len(data) // REC):
    rec = data[i * REC:(i + 1) * REC]
    ri, g = struct.unpack("<QQ", rec[:16])
    if ri != i or rec != rec[:16] * (REC // 16):
        bad.append(i)
    else:
        gens.add(g)
tail = len(data) % REC
print(f"victim: {len(data)} bytes, {len(data) // REC} records, passes {min(gens, default=0)}..{max(gens, default=0)}, "
      f"{len(bad)} torn (records {bad[:4]}), {tail} bytes past the last whole record")
# One write was in flight when the process died: at most that record may be torn.
sys.exit(0 if len(bad) <= 1 and (not gens or max(gens) - min(gens) <= 1) else 1)
'

# The other victim: churns names in its directory (write a temporary file, rename it over
# slot i, unlink and make directories) for ever. Slot i, when it exists, holds "i" 100 times;
# a temporary file may be cut short by the kill, never hold anything else.
victim_meta_py='
import os, sys
d, pidfile = sys.argv[1], sys.argv[2]
os.makedirs(d, exist_ok=True)
with open(pidfile + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(pidfile + ".tmp", pidfile)
n = 0
while True:
    n += 1
    i = n % 200
    with open(f"{d}/tmp.{i}", "w") as f:
        f.write(f"{i}\n" * 100)
    os.rename(f"{d}/tmp.{i}", f"{d}/m.{i}")
    if n % 3 == 0 and os.path.exists(f"{d}/m.{n * 7 % 200}"):
        os.unlink(f"{d}/m.{n * 7 % 200}")
    if n % 5 == 0:
        os.mkdir(f"{d}/dir.{n}")
        if n > 5:
            os.rmdir(f"{d}/dir.{n - 5}")
'

victim_meta_check_py='
import os, re, sys
d = sys.argv[1]
names = os.listdir(d)
slots = tmps = 0
for name in names:
    p = os.path.join(d, name)
    m = re.fullmatch(r"(m|tmp)\.(\d+)", name)
    if m:
        want = f"{m.group(2)}\n" * 100
        got = open(p).read()
        if m.group(1) == "m":
            assert got == want, f"{name}: {got[:40]!r}... is not its whole content"
            slots += 1
        else:
            assert want.startswith(got), f"{name}: {got[:40]!r}... is not a prefix of its content"
            tmps += 1
    else:
        assert re.fullmatch(r"dir\.\d+", name) and os.path.isdir(p), f"stray entry {name}"
print(f"churn victim: {slots} slot files whole, {tmps} temporary files (prefixes), {len(names) - slots - tmps} directories")
'

# The survivor of the kill step: keeps creating, writing, renaming and verifying files until
# told to stop, then checks all it wrote.
survivor='
  set -euo pipefail
  d=$1; stop=$2; n=0
  while [ ! -e "$stop" ]; do
    n=$((n + 1))
    seq "$n" $((n + 99)) > "$d/s.$n.tmp"
    mv "$d/s.$n.tmp" "$d/s.$n"
    echo "$n" >> "$d/survivor.log"
    [ "$(head -1 "$d/s.$n")" = "$n" ] || { echo "survivor: s.$n reads wrong"; exit 1; }
  done
  for ((k = 1; k <= n; k++)); do
    [ "$(tail -1 "$d/s.$k")" = $((k + 99)) ] || { echo "survivor: s.$k wrong at the end"; exit 1; }
  done
  [ "$(wc -l < "$d/survivor.log")" = "$n" ]
  echo "survivor: $n files written and verified while the victims were killed"
'

step_kill() {
  local d="$P/sigkill" rounds=${KILL_ROUNDS:-4} secs=${KILL_SECONDS:-1} r vpid vjob spid rc delay
  local stop="$work/stop-survivor" pidfile
  nv mkdir "$d"
  rm -f "$stop"
  nv bash -c "$survivor" _ "$d" "$stop" &
  spid=$!
  bg_pids+=("$spid")
  for ((r = 1; r <= rounds; r++)); do
    pidfile="$work/victim.$r.pid"
    # Odd rounds overwrite data, even rounds churn names; the kill lands at a random moment.
    if ((r % 2)); then
      nv python3 -c "$victim_py" "$d/victim.$r" "$pidfile" &
    else
      nv python3 -c "$victim_meta_py" "$d/churn.$r" "$pidfile" &
    fi
    vjob=$!
    bg_pids+=("$vjob")
    local t=0
    until [ -s "$pidfile" ] || [ $t -ge 100 ]; do
      sleep 0.1
      t=$((t + 1))
    done
    [ -s "$pidfile" ] || {
      echo "victim $r did not start"
      return 1
    }
    vpid=$(cat "$pidfile")
    delay=$(awk -v s="$secs" -v r="$RANDOM" 'BEGIN { printf "%.2f", s + r % 1000 / 1000 }')
    sleep "$delay"
    kill -0 "$vpid" || {
      echo "victim $r ended on its own"
      return 1
    }
    kill -9 "$vpid"
    rc=0
    wait "$vjob" || rc=$?
    echo "round $r: victim (pid $vpid) SIGKILLed after $delay s; nvmfs run exited $rc"
    # The image keeps working for a new process at once.
    nv bash -c 'echo after-kill-'"$r"' > "$1/after.'"$r"'" && [ "$(cat "$1/after.'"$r"'")" = after-kill-'"$r"' ]' _ "$d"
  done
  touch "$stop"
  wait "$spid" || {
    echo "the survivor failed"
    return 1
  }
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then
      nv python3 -c "$victim_check_py" "$d/victim.$r"
    else
      nv python3 -c "$victim_meta_check_py" "$d/churn.$r"
    fi
  done
  nv ls -l "$d" | grep -v ' s\.' || true
  check_image
  nv rm -r "$d"
}

step_conflict() {
  local fifo="$work/holder.fifo" ready="$work/holder.ready" hpid rc out
  mkfifo "$fifo"
  mkdir -p "$cmnt"
  nv bash -c 'echo held > "$P/held"; exec 3< "$P/held"; echo ready > "$1"; read -r _ < "$2"; cat <&3' _ "$ready" "$fifo" >"$work/holder.out" &
  hpid=$!
  bg_pids+=("$hpid")
  local t=0
  until [ -s "$ready" ] || [ $t -ge 100 ]; do
    sleep 0.1
    t=$((t + 1))
  done
  [ -s "$ready" ] || {
    echo "the holding process did not start"
    return 1
  }
  # While an nvmfs run process holds the image, nvmfs mount and fsck -y refuse.
  rc=0
  out=$("$nvmfs" mount "$img" "$cmnt" 2>&1) || rc=$?
  echo "nvmfs mount while nvmfs run holds the image: exit $rc: $out"
  if is_mounted "$cmnt"; then
    fuse_unmount "$cmnt"
    echo "nvmfs mount succeeded while the image was in use"
    return 1
  fi
  [ "$rc" != 0 ] && grep -Eiq 'in use|another process|shared|nvmfs run' <<<"$out"
  rc=0
  out=$("$nvmfs" fsck -y "$img" 2>&1) || rc=$?
  echo "nvmfs fsck -y while nvmfs run holds the image: exit $rc: $out"
  [ "$rc" != 0 ] && grep -Eiq 'in use|another process|shared|mounted' <<<"$out"
  # A second program under nvmfs run meanwhile is fine.
  [ "$(nv cat "$P/held")" = held ]
  echo >"$fifo"
  wait "$hpid"
  [ "$(cat "$work/holder.out")" = held ]
  check_image
  # And the other way round: while nvmfs mount serves the image, nvmfs run refuses.
  [ -c /dev/fuse ] || {
    echo "no /dev/fuse: the reverse direction (nvmfs run while mounted) is not checked"
    return 0
  }
  fuse_mount "$cmnt"
  rc=0
  out=$(nv bash -c 'touch "$1"; cat "$P/held"' _ "$work/program-ran" 2>&1) || rc=$?
  fuse_unmount "$cmnt"
  echo "nvmfs run while nvmfs mount serves the image: exit $rc: $out"
  [ "$rc" != 0 ] && grep -Eiq 'mounted exclusively|in use|another process' <<<"$out"
  # Refused before the program starts, not a program meeting errors under the prefix.
  [ ! -e "$work/program-ran" ] || {
    echo "nvmfs run started the program although the image is mounted"
    return 1
  }
  [ "$(nv cat "$P/held")" = held ]
  nv rm "$P/held"
  check_image
}

step_readonly() {
  nv bash -c 'mkdir -p "$P/ro" && echo data > "$P/ro/file"'
  check_image
  [ "$("$nvmfs" run --ro --image "$img" --prefix "$P" -- cat "$P/ro/file")" = data ]
  local rc=0 out
  out=$("$nvmfs" run --ro --image "$img" --prefix "$P" -- touch "$P/ro/new" 2>&1) || rc=$?
  echo "touch under --ro: exit $rc: $out"
  [ "$rc" != 0 ] && grep -q 'Read-only file system' <<<"$out"
  nv test ! -e "$P/ro/new"
  nv rm -r "$P/ro"
  check_image
}

step_final() {
  if [ "$via" = fuse ]; then
    fuse_unmount "$P"
    "$nvmfs" fsck "$img"
  else
    check_image
  fi
  "$nvmfs" info "$img" | sed -n '/^usage:/,/kinds:/p'
}

if [ "$via" = fuse ] && [ ! -d "$P" ]; then
  mkdir -p "$P"
  created_prefix=1
fi
run_step setup step_setup
# The other steps need the image (and for VIA=fuse the mount), not a clean setup step.
if [ -e "$img" ] && { [ "$via" = run ] || is_mounted "$P"; }; then
  run_step sqlite3 step_sqlite
  run_step fio-verify step_fio
  run_step postmark step_postmark
  run_step tar-roundtrip step_tar
  run_step coreutils step_coreutils
  run_step shell step_shell
  run_step git step_git
  run_step db_bench step_db_bench
  run_step concurrent step_concurrent
  run_step sigkill step_kill
  if [ "$via" = run ]; then
    run_step conflict step_conflict
    run_step read-only step_readonly
  fi
  run_step fsck-final step_final
fi

echo
[ ${#failures[@]} -eq 0 ] || echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
