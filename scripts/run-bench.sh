#!/usr/bin/env bash
# Real programs side by side: the same fio, sqlite3 and db_bench runs under `nvmfs run` (nvmfs
# in-process through the LD_PRELOAD library), on tmpfs and on ext4 over a RAM-backed loop
# device, in one run; plus nvmfs's in-process library and run:nvmfs from `nvmfs bench micro`.
# Prints one Markdown table with nvmfs run's ratios to tmpfs and ext4 and writes JSON.
#
#   bash scripts/run-bench.sh [PATH/TO/nvmfs]      (default target/release/nvmfs; root)
#
# A benchmark, not a test: it fails only when a program fails, never on a ratio.
#
# Workloads (each target in turn; TRIALS trials each, the first discarded as warm-up; mean and
# 95% confidence interval of the rest):
#   fio-randread-4k, fio-randwrite-4k  fio psync, 4 KiB, 1 job, a FIO_FILE_SIZE file laid out
#                        and read once before the trials, never invalidated (so ext4's page
#                        cache is warm, as tmpfs is), time-based FIO_SECONDS a trial; IOPS
#   fio-create, fio-stat, fio-delete   fio's filecreate, filestat and filedelete engines on
#                        META_FILES files in one directory; ops/s = 1 / mean completion latency
#                        (fio's own IOPS counts its per-file bookkeeping, which dominates here)
#   sqlite3-insert       SQLITE_ROWS rows of 200 bytes in transactions of 10, rollback journal,
#                        into a fresh database; wall seconds of the sqlite3 process
#   db_bench fillrandom, readrandom    DB_BENCH_NUM keys into a fresh database; ops/s
#   micro randread-4k, overwrite-4k    `nvmfs bench micro -t nvmfs -t run:nvmfs -t tmpfs
#                        -t dir:EXT4` (--file-size FIO_FILE_SIZE, --seconds MICRO_SECONDS)
#
# Environment: TARGETS ("run tmpfs ext4"), TRIALS (4), FIO_FILE_SIZE (1G), FIO_SECONDS (3),
# META_FILES (2000), SQLITE_ROWS (50000), DB_BENCH_NUM (200000), MICRO_SECONDS (2),
# MICRO=0 skips bench micro, HUGE_IMAGE=1 puts the nvmfs images on a private tmpfs mounted
# with huge=always (2 MiB pages for the image mapping; tmpfs and ext4 stay as they are),
# HUGE_TMPFS=1 puts the tmpfs target on that huge-page tmpfs too, OUT (results/run-bench-<UTC time>; gets run-bench.md,
# run-bench.json, trials.csv, micro.json and every program's raw output).
# Needs fio, sqlite3 and db_bench (Debian fio, sqlite3, rocksdb-tools; installed with apt-get
# when missing). Every image, loop device and mount is removed on exit.
set -euo pipefail

nvmfs=${1:-target/release/nvmfs}
case $nvmfs in /*) ;; *) nvmfs="$PWD/$nvmfs" ;; esac

die() {
  printf 'run-bench: %s\n' "$*" >&2
  exit 2
}

targets=${TARGETS:-run tmpfs ext4}
trials=${TRIALS:-4}
fio_size=${FIO_FILE_SIZE:-1G}
fio_secs=${FIO_SECONDS:-3}
meta_files=${META_FILES:-2000}
sqlite_rows=${SQLITE_ROWS:-50000}
db_num=${DB_BENCH_NUM:-200000}
micro_secs=${MICRO_SECONDS:-2}
out=${OUT:-results/run-bench-$(date -u +%Y%m%dT%H%M%SZ)}
prefix=/nvmfs

for t in $targets; do
  case $t in run | tmpfs | ext4) ;; *) die "unknown target $t in TARGETS (run, tmpfs, ext4)" ;; esac
done
[ -x "$nvmfs" ] || die "nvmfs binary not found at $nvmfs (build it: cargo build --release)"
case " $targets " in *" ext4 "*) [ "$(id -u)" = 0 ] || die "the ext4 target needs root (losetup, mount); TARGETS without ext4 runs without" ;; esac
case " $targets " in *" run "*) "$nvmfs" run --help >/dev/null 2>&1 || die "$nvmfs has no 'run' command" ;; esac

need=()
for p in fio:fio sqlite3:sqlite3 db_bench:rocksdb-tools python3:python3; do
  command -v "${p%%:*}" >/dev/null 2>&1 || need+=("${p#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${need[*]}: install them (apt-get, as root)"
  echo "installing ${need[*]} (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null) ||
    die "cannot install ${need[*]} with apt-get"
fi

mkdir -p "$out/raw"
out=$(cd "$out" && pwd)
raw="$out/raw"
work=$(mktemp -d /tmp/nvmfs-run-bench.XXXXXX)
# HUGE_IMAGE=1: the nvmfs images (nvmfs run's and bench micro's nvmfs and run:nvmfs) on a
# private tmpfs mounted with huge=always, so the image is mapped with 2 MiB pages (/dev/shm
# uses 4 KiB pages unless /sys/kernel/mm/transparent_hugepage/shmem_enabled says otherwise).
# HUGE_TMPFS=1 puts the tmpfs target there too, so that both sides have 2 MiB pages (tmpfs's
# page cache then holds huge folios, which also speeds up the kernel's copies).
huge_image=${HUGE_IMAGE:-0}
huge_tmpfs=${HUGE_TMPFS:-0}
huge_dir="$work/huge"
image_dir=/dev/shm
[ "$huge_image" = 1 ] && image_dir=$huge_dir
tmpfs_parent=/dev/shm
[ "$huge_tmpfs" = 1 ] && tmpfs_parent=$huge_dir
img=$(mktemp -u "$image_dir/nvmfs-run-bench.XXXXXX.img")
tmpfs_dir=$(mktemp -u "$tmpfs_parent/nvmfs-run-bench-tmpfs.XXXXXX")
ext4_img=$(mktemp -u /dev/shm/nvmfs-run-bench-ext4.XXXXXX.img)
ext4_mnt="$work/ext4"
loop=

cleanup() {
  local rc=$?
  set +e
  cd /
  if [ -n "$loop" ]; then
    mountpoint -q "$ext4_mnt" && { umount "$ext4_mnt" || umount -l "$ext4_mnt"; }
    losetup -d "$loop"
  fi
  rm -rf "$tmpfs_dir"
  rm -f "$ext4_img"
  if [ -e "$img" ]; then
    # A program killed under nvmfs run leaves the coordination file of the image (and the
    # description files and the directory of its lock files).
    local dev ino
    read -r dev ino < <(stat -c '%d %i' "$img")
    local coord
    coord=$(printf '/dev/shm/nvmfs-%x-%x.coord' "$dev" "$ino")
    rm -rf "$coord" "$coord".d* "$coord.locks" "$img"
  fi
  mountpoint -q "$huge_dir" && umount "$huge_dir"
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { printf '%s\n' "$*" >&2; }

# The private huge-page tmpfs, mounted once when HUGE_IMAGE or HUGE_TMPFS asks for it.
mount_huge() {
  if ! mountpoint -q "$huge_dir"; then
    mkdir -p "$huge_dir"
    mount -t tmpfs -o size=12G,huge=always nvmfs-run-bench-huge "$huge_dir"
  fi
}

# on TARGET PROGRAM ARGS...: runs PROGRAM for TARGET (under nvmfs run for "run").
on() {
  local t=$1
  shift
  if [ "$t" = run ]; then
    "$nvmfs" run --image "$img" --prefix "$prefix" -- "$@"
  else
    "$@"
  fi
}

# The directory each target works in.
dir_of() {
  case $1 in
    run) echo "$prefix/bench" ;;
    tmpfs) echo "$tmpfs_dir" ;;
    ext4) echo "$ext4_mnt/bench" ;;
  esac
}

setup_targets() {
  local t
  for t in $targets; do
    case $t in
      run)
        [ "$huge_image" = 1 ] && mount_huge
        # The 1 GiB file, the metadata files, sqlite and RocksDB at once, with room.
        "$nvmfs" mkfs --size 3G "$img" >/dev/null
        on run mkdir "$(dir_of run)"
        ;;
      tmpfs)
        [ "$huge_tmpfs" = 1 ] && mount_huge
        mkdir "$tmpfs_dir"
        ;;
      ext4)
        truncate -s 4G "$ext4_img"
        loop=$(losetup -f --show "$ext4_img")
        losetup --direct-io=on "$loop" || say "warning: direct I/O refused on $loop"
        mkfs.ext4 -F -q -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$loop"
        mkdir -p "$ext4_mnt"
        mount -t ext4 "$loop" "$ext4_mnt"
        mkdir "$ext4_mnt/bench"
        ;;
    esac
  done
}

# record WORKLOAD TARGET TRIAL VALUE
record() {
  printf '%s,%s,%s,%s\n' "$1" "$2" "$3" "$4" >>"$out/trials.csv"
}

# fio_value JSON KIND: IOPS of the job ("iops"), or 1e9 / mean completion latency ("lat").
fio_value() {
  python3 - "$1" "$2" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]
if job["error"]:
    sys.exit(f"fio job error {job['error']}")
d = max((job["read"], job["write"]), key=lambda d: d["total_ios"])
if sys.argv[2] == "iops":
    print(f"{d['iops']:.1f}")
else:
    print(f"{1e9 / d['clat_ns']['mean']:.1f}")
PY
}

bench_fio_data() { # TARGET
  local t=$1 d f rw trial v
  d=$(dir_of "$t")
  f="$d/fio.data"
  say "[$t] fio: laying out $fio_size and reading it once"
  on "$t" fio --name=layout --filename="$f" --size="$fio_size" --rw=write --bs=1M --ioengine=psync \
    --output="$raw/fio-layout-$t.txt" >/dev/null
  on "$t" fio --name=warm --filename="$f" --size="$fio_size" --rw=read --bs=1M --ioengine=psync --invalidate=0 \
    --output="$raw/fio-warm-$t.txt" >/dev/null
  for rw in randread randwrite; do
    for ((trial = 1; trial <= trials; trial++)); do
      on "$t" fio --name="$rw" --filename="$f" --size="$fio_size" --rw="$rw" --bs=4k \
        --ioengine=psync --numjobs=1 --time_based --runtime="$fio_secs" --norandommap --invalidate=0 \
        --randrepeat=0 --output-format=json --output="$raw/fio-$rw-$t-$trial.json" >/dev/null
      v=$(fio_value "$raw/fio-$rw-$t-$trial.json" iops)
      record "fio-$rw-4k" "$t" "$trial" "$v"
      say "[$t] fio $rw 4k trial $trial: $v IOPS"
    done
  done
  on "$t" rm -f "$f"
}

bench_fio_meta() { # TARGET
  local t=$1 d trial e v
  d="$(dir_of "$t")/meta"
  for ((trial = 1; trial <= trials; trial++)); do
    on "$t" mkdir "$d"
    for e in filecreate filestat filedelete; do
      on "$t" fio --name=m --ioengine="$e" --directory="$d" --nrfiles="$meta_files" --filesize=4k \
        --openfiles=1 --fallocate=none --create_on_open=1 --output-format=json \
        --output="$raw/fio-$e-$t-$trial.json" >/dev/null
      v=$(fio_value "$raw/fio-$e-$t-$trial.json" lat)
      record "fio-${e#file}" "$t" "$trial" "$v"
      say "[$t] fio $e trial $trial: $v ops/s (1 / mean latency)"
    done
    on "$t" rm -rf "$d"
  done
}

bench_sqlite() { # TARGET
  local t=$1 d trial t0 t1 v
  d=$(dir_of "$t")
  for ((trial = 1; trial <= trials; trial++)); do
    t0=$(date +%s.%N)
    on "$t" sqlite3 -bail "$d/insert.db" <"$work/insert.sql" >/dev/null
    t1=$(date +%s.%N)
    [ "$(on "$t" sqlite3 "$d/insert.db" 'SELECT count(*) FROM t')" = "$sqlite_rows" ] ||
      die "[$t] sqlite3: wrong row count"
    v=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
    record sqlite3-insert "$t" "$trial" "$v"
    say "[$t] sqlite3 insert trial $trial: $v s"
    on "$t" rm -f "$d/insert.db"
  done
}

bench_db_bench() { # TARGET
  local t=$1 d trial b v o
  d=$(dir_of "$t")
  for ((trial = 1; trial <= trials; trial++)); do
    o="$raw/db_bench-$t-$trial.txt"
    on "$t" db_bench --db="$d/rocksdb" --benchmarks=fillrandom,readrandom --num="$db_num" --seed=1 \
      >"$o" 2>"$raw/db_bench-$t-$trial.err"
    if grep -Eiq 'error|corrupt' "$o" "$raw/db_bench-$t-$trial.err"; then
      die "[$t] db_bench reported errors (see $o)"
    fi
    for b in fillrandom readrandom; do
      v=$(sed -nE "s/^$b +:.* ([0-9]+) ops\/sec.*/\1/p" "$o")
      [ -n "$v" ] || die "[$t] db_bench printed no $b result (see $o)"
      record "db_bench-$b" "$t" "$trial" "$v"
      say "[$t] db_bench $b trial $trial: $v ops/s"
    done
    on "$t" rm -rf "$d/rocksdb"
  done
}

bench_micro() {
  local nv=(-t nvmfs) kt=() args
  case " $targets " in *" run "*) nv+=(-t run:nvmfs) ;; esac
  case " $targets " in *" tmpfs "*) kt+=(-t tmpfs) ;; esac
  case " $targets " in *" ext4 "*) kt+=(-t "dir:$ext4_mnt") ;; esac
  args=(-w randread-4k -w overwrite-4k --file-size "$fio_size" --seconds "$micro_secs"
    --image-size "$(($(numfmt --from=iec "$fio_size") / 1048576 + 512))M")
  # The nvmfs targets' images where nvmfs run's is; tmpfs where the tmpfs target is.
  if [ "$huge_image" = 1 ] || [ "$huge_tmpfs" = 1 ]; then
    mount_huge
  fi
  say "nvmfs bench micro ${nv[*]} ${kt[*]} ${args[*]}"
  "$nvmfs" bench micro "${nv[@]}" "${args[@]}" --shm-dir "$image_dir" --json "$work/micro-nv.json" \
    >"$raw/micro.txt"
  echo '[]' >"$work/micro-k.json"
  if [ ${#kt[@]} -gt 0 ]; then
    "$nvmfs" bench micro "${kt[@]}" "${args[@]}" --shm-dir "$tmpfs_parent" --json "$work/micro-k.json" \
      >>"$raw/micro.txt"
  fi
  python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1])) + json.load(open(sys.argv[2])), open(sys.argv[3], "w"), indent=2)' \
    "$work/micro-nv.json" "$work/micro-k.json" "$out/micro.json"
}

# --- run ----------------------------------------------------------------------------------
rm -f "$out/micro.json"
echo "workload,target,trial,value" >"$out/trials.csv"
awk -v rows="$sqlite_rows" 'BEGIN {
  print "CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB NOT NULL);"
  print "CREATE INDEX t_k ON t(k);"
  for (i = 1; i <= rows; i++) {
    if ((i - 1) % 10 == 0) print "BEGIN;"
    printf "INSERT INTO t VALUES (%d, %c%08x%c, randomblob(200));\n", i, 39, i * 2654435761 % 4294967296, 39
    if (i % 10 == 0 || i == rows) print "COMMIT;"
  }
}' >"$work/insert.sql"

started=$(date +%s)
setup_targets
for t in $targets; do
  bench_fio_data "$t"
  bench_fio_meta "$t"
  bench_sqlite "$t"
  bench_db_bench "$t"
done
[ "${MICRO:-1}" = 1 ] && bench_micro
wall=$(($(date +%s) - started))

if [ -e "$img" ]; then
  "$nvmfs" fsck "$img" >"$raw/fsck.txt" || die "fsck of the nvmfs run image failed: $(cat "$raw/fsck.txt")"
fi

export HUGE_IMAGE=$huge_image HUGE_TMPFS=$huge_tmpfs TRIALS=$trials FIO_FILE_SIZE=$fio_size FIO_SECONDS=$fio_secs META_FILES=$meta_files \
  SQLITE_ROWS=$sqlite_rows DB_BENCH_NUM=$db_num MICRO_SECONDS=$micro_secs
python3 - "$out" "$targets" "$wall" <<'PY'
import csv, json, math, os, platform, sys, time
out, targets, wall = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
cfg = {k: os.environ.get(k) for k in ["HUGE_IMAGE", "HUGE_TMPFS", "TRIALS", "FIO_FILE_SIZE", "FIO_SECONDS", "META_FILES",
                                      "SQLITE_ROWS", "DB_BENCH_NUM", "MICRO_SECONDS"]}
names = {"run": "nvmfs run", "tmpfs": "tmpfs", "ext4": "ext4"}
# (workload, unit, higher is better)
workloads = [
    ("fio-randread-4k", "IOPS", True),
    ("fio-randwrite-4k", "IOPS", True),
    ("fio-create", "ops/s", True),
    ("fio-stat", "ops/s", True),
    ("fio-delete", "ops/s", True),
    ("sqlite3-insert", "s", False),
    ("db_bench-fillrandom", "ops/s", True),
    ("db_bench-readrandom", "ops/s", True),
]
# Student-t 97.5% quantiles by degrees of freedom.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228}

def summary(values):
    kept = values[1:] if len(values) >= 2 else values
    n = len(kept)
    mean = sum(kept) / n
    if n < 2:
        return {"trials": values, "kept": n, "mean": mean, "ci95_half_width": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in kept) / (n - 1))
    return {"trials": values, "kept": n, "mean": mean,
            "ci95_half_width": T975.get(n - 1, 1.96) * sd / math.sqrt(n)}

trials = {}
with open(os.path.join(out, "trials.csv")) as f:
    for r in csv.DictReader(f):
        trials.setdefault((r["workload"], r["target"]), []).append(float(r["value"]))

def fmt(x, unit):
    if unit == "s":
        return f"{x:.3f}"
    return f"{x:,.0f}"

rows = []
for w, unit, higher in workloads:
    res = {t: summary(trials[(w, t)]) for t in targets if (w, t) in trials}
    row = {"workload": w, "unit": unit, "higher_is_better": higher, "targets": res}
    for other in ("tmpfs", "ext4"):
        if "run" in res and other in res:
            a, b = res["run"]["mean"], res[other]["mean"]
            row[f"run_vs_{other}"] = a / b if higher else b / a
    rows.append(row)

micro = []
mpath = os.path.join(out, "micro.json")
if os.path.exists(mpath):
    micro = json.load(open(mpath))

lines = []
cols = [t for t in ["run", "tmpfs", "ext4"] if t in targets]
head = ["workload", "unit"] + [names[t] for t in cols]
ratio_cols = [o for o in ("tmpfs", "ext4") if "run" in cols and o in cols]
head += [f"nvmfs run vs {o}" for o in ratio_cols]
lines.append("| " + " | ".join(head) + " |")
lines.append("|" + "---|" * len(head))
for row in rows:
    cells = [row["workload"], row["unit"]]
    for t in cols:
        s = row["targets"].get(t)
        if s is None:
            cells.append("-")
            continue
        ci = s["ci95_half_width"]
        pct = f" ± {100 * ci / s['mean']:.0f}%" if ci is not None and s["mean"] else ""
        cells.append(fmt(s["mean"], row["unit"]) + pct)
    for o in ratio_cols:
        r = row.get(f"run_vs_{o}")
        cells.append(f"**{r:.2f}x**" if r is not None else "-")
    lines.append("| " + " | ".join(cells) + " |")

mlines = []
if micro:
    by = {(r["workload"], r["target"]): r for r in micro}
    mt = []
    for r in micro:
        if r["target"] not in mt:
            mt.append(r["target"])
    label = {"nvmfs": "nvmfs (library)", "run:nvmfs": "run:nvmfs", "tmpfs": "tmpfs"}
    mhead = ["bench micro", *[label.get(t, "ext4" if t.startswith("dir:") else t) for t in mt]]
    if "nvmfs" in mt and "run:nvmfs" in mt:
        mhead.append("library / run:nvmfs")
    mlines.append("| " + " | ".join(mhead) + " |")
    mlines.append("|" + "---|" * len(mhead))
    for w in ["randread-4k", "overwrite-4k"]:
        cells = [w]
        for t in mt:
            r = by.get((w, t))
            cells.append(f"{r['ops_per_sec']:,.0f}/s (p50 {r['latency_ns']['p50']} ns)" if r else "-")
        if "nvmfs" in mt and "run:nvmfs" in mt and (w, "nvmfs") in by and (w, "run:nvmfs") in by:
            cells.append(f"**{by[(w, 'nvmfs')]['ops_per_sec'] / by[(w, 'run:nvmfs')]['ops_per_sec']:.2f}x**")
        mlines.append("| " + " | ".join(cells) + " |")

goals = []
def goal(text, value, ok):
    goals.append({"goal": text, "value": value, "met": ok})
for w, want in [("fio-randread-4k", 1.4), ("fio-randwrite-4k", 1.6)]:
    r = next((x.get("run_vs_tmpfs") for x in rows if x["workload"] == w), None)
    if r is not None:
        goal(f"{w} under nvmfs run >= {want}x tmpfs", r, r >= want)
if micro:
    by = {(r["workload"], r["target"]): r["ops_per_sec"] for r in micro}
    for w in ["randread-4k", "overwrite-4k"]:
        if (w, "nvmfs") in by and (w, "run:nvmfs") in by:
            r = by[(w, "nvmfs")] / by[(w, "run:nvmfs")]
            goal(f"bench micro {w}: library / run:nvmfs <= 1.3x", r, r <= 1.3)

cpu = ""
try:
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except (OSError, StopIteration):
    pass
env = {"kernel": platform.release(), "cpu_model": cpu, "cpus": os.cpu_count(),
       "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "wall_seconds": wall}
md = [f"# nvmfs run against tmpfs and ext4 ({env['finished_utc']}, {env['cpus']} CPUs, {cpu})", "",
      "Mean of the kept trials (the first of each is discarded) ± 95% CI half-width; "
      "ratios are nvmfs run's advantage (for sqlite3's seconds: the other's time over nvmfs run's). "
      "ext4: a loop device over /dev/shm with direct I/O, page cache warm; tmpfs and ext4 writes "
      "are not fsynced, nvmfs's are durable on return. nvmfs images: "
      + ("on a tmpfs mounted huge=always (mapped with 2 MiB pages)." if cfg["HUGE_IMAGE"] == "1"
         else "in /dev/shm (mapped with 4 KiB pages).")
      + (" tmpfs: the same huge=always tmpfs." if cfg["HUGE_TMPFS"] == "1"
         else " tmpfs: a directory in /dev/shm."), "", *lines, ""]
if mlines:
    md += ["Same run, `nvmfs bench micro` (one trial each):", "", *mlines, ""]
if goals:
    md += ["Targets:", ""]
    md += [f"- {g['goal']}: {g['value']:.2f}x, {'met' if g['met'] else 'NOT met'}" for g in goals]
    md.append("")
text = "\n".join(md)
print(text)
open(os.path.join(out, "run-bench.md"), "w").write(text)
json.dump({"schema": "nvmfs-lab/run-bench/v1", "environment": env, "config": cfg,
           "targets": targets, "rows": rows, "micro": micro, "goals": goals},
          open(os.path.join(out, "run-bench.json"), "w"), indent=2)
print(f"results in {out}", file=sys.stderr)
PY
