#!/usr/bin/env bash
# Real programs on an nvmfs FUSE mount: sqlite3, fio with verify, postmark, a tar round trip,
# git, and nvmfs fsck of the image afterwards. Each step prints PASS or FAIL; the last line is
# "N passed, M failed" and the exit status is non-zero if anything failed.
#
#   bash scripts/fuse-programs.sh [PATH/TO/nvmfs]      (default target/release/nvmfs; root)
#
# Builds nothing. Installs sqlite3, fio, postmark and git with apt-get when missing. The
# image (1 GiB) lives in /dev/shm; it is unmounted and removed on exit, also on failure.
# Environment: FIO_SIZE (default 384M a job), FIO_JOBS (2), POSTMARK_NUMBER (2000), POSTMARK_TRANSACTIONS (5000),
# SQLITE_ROWS (10000), KEEP_LOGS=1 keeps the step logs, MOUNT_OPTS=OPTS mounts with -o OPTS
# (e.g. MOUNT_OPTS=io_uring: FUSE over io_uring). FSX=1 adds an fsx step (needs
# `cargo install fsx`; scripts/fsx.toml, FSX_OPS operations (100000) for each of FSX_SEEDS
# ("1 2 3"); about 4 minutes, so not run by default).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
nvmfs=${1:-target/release/nvmfs}
case $nvmfs in /*) ;; *) nvmfs="$PWD/$nvmfs" ;; esac

die() {
  printf 'fuse-programs: %s\n' "$*" >&2
  exit 2
}

[ "$(id -u)" = 0 ] || die "must run as root (mounts FUSE, installs packages)"
[ -c /dev/fuse ] || die "/dev/fuse is missing: FUSE is not available on this machine"
[ -x "$nvmfs" ] || die "nvmfs binary not found at $nvmfs (build it: cargo build --release -p nvmfs-cli)"
[ -d /dev/shm ] || die "/dev/shm is missing"

# --- tools ------------------------------------------------------------------------------
need=()
for p in sqlite3 fio postmark git; do
  command -v "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (apt-get)"
  command -v apt-get >/dev/null 2>&1 || die "cannot install ${need[*]}: no apt-get on this machine; install them by hand"
  if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null); then
    die "cannot install ${need[*]} with apt-get (no network or no such package here); install them by hand"
  fi
  for p in "${need[@]}"; do
    command -v "$p" >/dev/null 2>&1 || die "$p is still missing after apt-get install"
  done
fi

# --- image, mount point, cleanup ----------------------------------------------------------
work=$(mktemp -d /tmp/nvmfs-programs.XXXXXX)
mnt="$work/mnt"
img=$(mktemp -u /dev/shm/nvmfs-programs.XXXXXX.img)
logs="$work/logs"
mkdir -p "$mnt" "$logs"

is_mounted() { mountpoint -q "$mnt" 2>/dev/null; }

# Waits until the daemon has let go of the image (it holds an exclusive flock while mounted
# and releases it after marking the image clean).
wait_released() {
  flock -x -w "${1:-60}" "$img" true 2>/dev/null
}

unmount_fs() {
  is_mounted || return 0
  umount "$mnt" 2>/dev/null || fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" || return 1
  wait_released 60 || {
    echo "image still held 60 s after unmount" >&2
    return 1
  }
}

mount_fs() {
  "$nvmfs" mount ${MOUNT_OPTS:+-o "$MOUNT_OPTS"} "$img" "$mnt" && is_mounted
}

cleanup() {
  local rc=$?
  set +e
  cd /
  if is_mounted; then
    umount "$mnt" 2>/dev/null || fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt"
    [ -e "$img" ] && wait_released 30
  fi
  rm -f "$img"
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
  printf '\n==> %s\n' "$name"
  start=$(date +%s.%N)
  set +e
  (
    set -euo pipefail
    cd "$work"
    "$fn"
  ) 2>&1 | tee "$logs/$name.log" | sed -u 's/^/    /'
  rc=${PIPESTATUS[0]}
  set -e
  # What a failed step left in the mount must not fill it for the next. (What passing steps
  # keep, the sqlite databases, the tar tree and the git repositories, is there for fsck.)
  if [ "$rc" != 0 ] && is_mounted && [ -e "$mnt/$name" ]; then
    rm -rf "${mnt:?}/$name" || true
  fi
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
  fi
}

# --- steps --------------------------------------------------------------------------------

step_mount() {
  "$nvmfs" --version 2>/dev/null || true
  "$nvmfs" mkfs --size 1G "$img"
  mount_fs
  grep " $mnt " /proc/mounts
  df -h "$mnt"
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
  } | sqlite3 -bail "$db" >/dev/null
}

sqlite_check() { # DB ROWS
  local db=$1 rows=$2 out
  out=$(sqlite3 -bail "$db" "PRAGMA integrity_check; SELECT count(*), sum(n), count(DISTINCT k) FROM t;")
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
  local rows=${SQLITE_ROWS:-10000} t0 t1
  local d="$mnt/sqlite3"
  mkdir "$d"
  t0=$(date +%s.%N)
  sqlite_fill "$d/rollback.db" "$rows" DELETE
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v r="$rows" 'BEGIN { printf "rollback journal: %d rows in %d transactions, %.2f s (%.0f tx/s)\n", r, r / 100, b - a, r / 100 / (b - a) }'
  t0=$(date +%s.%N)
  sqlite_fill "$d/wal.db" "$rows" WAL
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v r="$rows" 'BEGIN { printf "WAL (shared mmap -shm): %d rows in %d transactions, %.2f s (%.0f tx/s)\n", r, r / 100, b - a, r / 100 / (b - a) }'
  sqlite_check "$d/rollback.db" "$rows"
  sqlite_check "$d/wal.db" "$rows"
  echo "unmount, remount"
  unmount_fs
  mount_fs
  sqlite_check "$d/rollback.db" "$rows"
  sqlite_check "$d/wal.db" "$rows"
  ls -l "$d"
}

step_fio() {
  local size=${FIO_SIZE:-384M} jobs=${FIO_JOBS:-2} rc=0 dir="$mnt/fio-verify"
  mkdir "$dir"
  # Each job has its own file: it writes half of it at random 4 KiB offsets (mixed with
  # reads), then reads back and checks every block written (crc32c in a header of each
  # block). (No --loops: with randrw, fio 3.33 then reports "bad header rand_seed" on tmpfs
  # too, for blocks written in an earlier loop.)
  fio --name=randrw-verify --directory="$dir" --size="$size" --numjobs="$jobs" --group_reporting \
    --rw=randrw --bs=4k \
    --ioengine=psync --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 --randseed=1234 \
    --output-format=json --output="$work/fio.json" 2>"$work/fio.err" || rc=$?
  cat "$work/fio.err"
  [ -s "$work/fio.json" ] || {
    echo "fio wrote no report (exit $rc)"
    return 1
  }
  python3 - "$work/fio.json" <<'PY'
import json, sys
try:
    job = json.load(open(sys.argv[1]))["jobs"][0]
except (ValueError, KeyError, IndexError) as e:
    sys.exit(f"fio's JSON report is unreadable: {e}")
mib = 1 << 20
r, w = job["read"], job["write"]
secs = job.get("job_runtime", r["runtime"] + w["runtime"]) / 1000
o = job["job options"]
print(f"fio rw={o['rw']} bs={o['bs']} size={o['size']} numjobs={o.get('numjobs', 1)} verify={o['verify']}: "
      f"error={job['error']}, {secs:.1f} s of job time")
print(f"  write {w['io_bytes'] / mib:.0f} MiB at {w['bw_bytes'] / mib:.1f} MiB/s ({w['iops']:.0f} IOPS)")
print(f"  read (incl. verify) {r['io_bytes'] / mib:.0f} MiB at {r['bw_bytes'] / mib:.1f} MiB/s ({r['iops']:.0f} IOPS)")
sys.exit(1 if job["error"] else 0)
PY
  [ "$rc" = 0 ] || {
    echo "fio exited $rc"
    return 1
  }
  if grep -Eiq 'verify|bad magic|crc32c|wanted' "$work/fio.err"; then
    echo "fio reported verify errors"
    return 1
  fi
  echo "fio: exit 0, no verify errors"
  rm -rf "$dir"
}

step_postmark() {
  mkdir "$mnt/postmark"
  cat >"$work/postmark.cfg" <<EOF
set location $mnt/postmark
set number ${POSTMARK_NUMBER:-2000}
set transactions ${POSTMARK_TRANSACTIONS:-5000}
set size 500 10000
set subdirectories 10
set seed 42
show
run
quit
EOF
  postmark "$work/postmark.cfg" </dev/null >"$work/postmark.out" 2>&1
  cat "$work/postmark.out"
  # postmark exits 0 even when its operations fail: it reports them as "Error: ...".
  if grep -q 'Error' "$work/postmark.out"; then
    echo "postmark reported errors"
    return 1
  fi
  grep -q 'Deleting subdirectories...Done' "$work/postmark.out"
  grep -q 'seconds of transactions' "$work/postmark.out"
  # postmark deletes what it made; the directory must be empty again.
  [ -z "$(find "$mnt/postmark" -mindepth 1 -maxdepth 1 | head -1)" ] || {
    echo "postmark left files behind"
    return 1
  }
}

# Prints a manifest of each DIR (type, mode, size, sha256 or link target of every entry,
# sorted by path) and fails unless they are all equal.
same_trees() {
  python3 - "$@" <<'PY'
import hashlib, os, stat, sys

def manifest(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(d, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                out.append(("f", rel, stat.S_IMODE(st.st_mode), st.st_size, h.hexdigest()))
            elif stat.S_ISLNK(st.st_mode):
                out.append(("l", rel, 0, 0, os.readlink(p)))
            else:
                out.append((stat.S_IFMT(st.st_mode), rel, stat.S_IMODE(st.st_mode), 0, ""))
    return sorted(out, key=lambda e: e[1])

ms = [manifest(r) for r in sys.argv[1:]]
for r, m in zip(sys.argv[2:], ms[1:]):
    if m != ms[0]:
        a, b = set(ms[0]), set(m)
        print(f"{r} differs from {sys.argv[1]}: {len(a - b)} entries missing or changed, {len(b - a)} extra")
        for e in sorted(a - b, key=lambda e: e[1])[:10]:
            print("  want", e)
        for e in sorted(b - a, key=lambda e: e[1])[:10]:
            print("  got ", e)
        sys.exit(1)
m = ms[0]
digest = hashlib.sha256(repr(m).encode()).hexdigest()[:16]
print(f"byte-identical: {len(m)} entries ({sum(e[0] == 'f' for e in m)} files, "
      f"{sum(e[3] for e in m) / 2**20:.1f} MiB), manifest sha256 {digest}")
PY
}

step_tar() {
  local src="$work/tar-src"
  mkdir -p "$src" "$mnt/tar-roundtrip" "$work/tar-out"
  # The repository's crates/ and /usr/share/doc (thousands of small files and symlinks).
  tar -C "$repo" -cf - crates | tar -C "$src" -xf -
  if [ -d /usr/share/doc ]; then
    tar -C /usr/share -cf - doc 2>/dev/null | tar -C "$src" -xf - || true
  fi
  echo "source: $(find "$src" -type f | wc -l) files, $(find "$src" -type l | wc -l) symlinks, $(du -sh "$src" | cut -f1)"
  tar -C "$src" -cf - . | tar -C "$mnt/tar-roundtrip" -xpf -
  tar -C "$mnt/tar-roundtrip" -cf "$work/back.tar" .
  tar -C "$work/tar-out" -xpf "$work/back.tar"
  diff -r --no-dereference "$src" "$work/tar-out"
  same_trees "$src" "$mnt/tar-roundtrip" "$work/tar-out"
  rm -rf "$src" "$work/tar-out" "$work/back.tar"
}

step_git() {
  local g=(git -c user.name="nvmfs CI" -c user.email="ci@nvmfs.invalid" -c init.defaultBranch=main
    -c safe.directory='*' -c gc.auto=0)
  export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
  mkdir "$mnt/git"
  cd "$mnt/git"
  "${g[@]}" init -q repo
  tar -C "$repo" -cf - crates docs README.md | tar -C repo -xf -
  cd repo
  "${g[@]}" add -A
  "${g[@]}" commit -q -m "import"
  echo "// change" >>README.md
  "${g[@]}" mv docs documentation
  "${g[@]}" commit -q -a -m "second"
  "${g[@]}" fsck --full --strict
  "${g[@]}" gc -q --aggressive
  "${g[@]}" fsck --full --strict
  "${g[@]}" log --oneline | cat
  [ -z "$("${g[@]}" status --porcelain)" ]
  cd ..
  # A local clone hard-links the objects; then check out the first commit.
  "${g[@]}" clone -q repo clone
  cd clone
  "${g[@]}" fsck --full --strict
  "${g[@]}" checkout -q HEAD~1
  [ -d docs ] && [ ! -e documentation ]
  "${g[@]}" status --porcelain | { ! grep -q .; }
  echo "git: $("${g[@]}" -C ../repo rev-list --count HEAD) commits, $("${g[@]}" ls-files | wc -l) files, fsck clean"
}

step_fsx() {
  local ops=${FSX_OPS:-100000} seed
  command -v fsx >/dev/null 2>&1 || {
    echo "fsx is not installed (cargo install fsx)"
    return 1
  }
  mkdir "$mnt/fsx" "$work/fsx"
  for seed in ${FSX_SEEDS:-1 2 3}; do
    echo "fsx -f scripts/fsx.toml -N $ops -S $seed"
    fsx -f "$repo/scripts/fsx.toml" -N "$ops" -S "$seed" -P "$work/fsx" "$mnt/fsx/f$seed" >"$work/fsx/seed$seed.log" 2>&1 || {
      tail -50 "$work/fsx/seed$seed.log"
      return 1
    }
    tail -1 "$work/fsx/seed$seed.log"
    rm -f "$mnt/fsx/f$seed"
  done
}

step_fsck() {
  unmount_fs
  "$nvmfs" fsck "$img"
}

run_step mount step_mount
if is_mounted; then
  run_step sqlite3 step_sqlite
  is_mounted || run_step remount mount_fs
  run_step fio-verify step_fio
  run_step postmark step_postmark
  run_step tar-roundtrip step_tar
  run_step git step_git
  # fsx takes about 75 s a seed here (4 min for three): only on request.
  [ "${FSX:-0}" = 1 ] && run_step fsx step_fsx
  run_step fsck-after-unmount step_fsck
fi

echo
[ ${#failures[@]} -eq 0 ] || echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
