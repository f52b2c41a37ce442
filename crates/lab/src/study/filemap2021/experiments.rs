//! The run of the file-mapping study: section 4's experiments on fresh images of every
//! mapping, in the order of [`super::EXPERIMENTS`].
//!
//! One image per mapping holds the large file and the small files, and serves 4.1 (locality),
//! 4.3 (file size), 4.4 (I/O size), 4.6 (concurrency) and 4.7 (page cache); 4.2 makes an image
//! per layout score, 4.5 one per fullness level, 4.8 one per Filebench personality and 4.9 the
//! same on level hashing (the only experiment on `level`). A failing
//! experiment is recorded and the others go on.

use super::{param, Experiment, MapRow, MapStudyConfig, MapStudyResult, EXPERIMENTS};
use crate::filebench::{self, Personality, PersonalityConfig, RunConfig};
use crate::mapbench::cached::PageCachedExtents;
use crate::mapbench::clock::{self, now, Evictor};
use crate::mapbench::image::{MapImage, BLOCK};
use crate::mapbench::ops::Bench;
use crate::mapbench::{threads, Op};
use crate::stats::Summary;
use crate::targets::nvmfs::NvmfsTarget;
use nvmfs::{FormatOptions, Fs, MappingKind};
use std::hint::black_box;
use std::io;
use std::time::Instant;

/// Runs every selected experiment on every selected mapping.
pub fn run(
    cfg: &MapStudyConfig,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(&str),
) -> io::Result<MapStudyResult> {
    let start = Instant::now();
    let mappings = cfg.mappings();
    if mappings.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no mapping selected; known: {:?}", MappingKind::ALL),
        ));
    }
    let mut r = Runner {
        cfg,
        ev: Evictor::new(cfg.evict_bytes),
        rows: Vec::new(),
        notes: Vec::new(),
        failures: Vec::new(),
        interrupted,
        progress,
    };
    r.all(&cfg.file_mappings());
    if cfg.runs("level-hashing") && mappings.contains(&super::LEVEL) {
        for p in [Personality::Fileserver, Personality::Webproxy] {
            r.attempt(&format!("level hashing: filebench {}", p.name()), |r| {
                r.filebench(exp("level-hashing"), p, super::LEVEL)
            });
        }
    }
    let order = |row: &MapRow| EXPERIMENTS.iter().position(|e| e.id == row.experiment);
    r.rows.sort_by_key(order);
    Ok(MapStudyResult {
        config: cfg.clone(),
        mappings: mappings.iter().map(|m| m.to_string()).collect(),
        rows: r.rows,
        notes: r.notes,
        failures: r.failures,
        interrupted: interrupted(),
        wall_seconds: start.elapsed().as_secs_f64(),
        unit: clock::UNIT,
    })
}

struct Runner<'a> {
    cfg: &'a MapStudyConfig,
    ev: Evictor,
    rows: Vec<MapRow>,
    notes: Vec<String>,
    failures: Vec<(String, String)>,
    interrupted: &'a dyn Fn() -> bool,
    progress: &'a mut dyn FnMut(&str),
}

fn exp(id: &str) -> &'static Experiment {
    super::experiment(id).expect("a known experiment")
}

fn interrupted_error() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "interrupted")
}

impl Runner<'_> {
    fn all(&mut self, mappings: &[MappingKind]) {
        let on_big = [
            "locality",
            "file-size",
            "io-size",
            "concurrency",
            "page-cache",
        ];
        for &m in mappings {
            if on_big.iter().any(|e| self.cfg.runs(e)) {
                self.attempt(&format!("large-file image on {m}"), |r| r.big_image(m));
            }
        }
        if self.cfg.runs("fragmentation") {
            for &m in mappings {
                for s in self.scores(m) {
                    self.attempt(&format!("fragmentation {} on {m}", param::score(s)), |r| {
                        r.fragmentation(m, s)
                    });
                }
            }
        }
        if self.cfg.runs("utilisation") {
            for &m in mappings {
                for f in self.cfg.fills.clone() {
                    self.attempt(&format!("utilisation {} on {m}", param::fill(f)), |r| {
                        r.utilisation(m, f)
                    });
                }
            }
        }
        if self.cfg.runs("filebench") {
            for p in [Personality::Fileserver, Personality::Webproxy] {
                for &m in mappings {
                    self.attempt(&format!("filebench {} on {m}", p.name()), |r| {
                        r.filebench(exp("filebench"), p, m)
                    });
                }
            }
        }
    }

    /// Runs `f`, recording a failure (and going on) instead of returning it.
    fn attempt(&mut self, what: &str, f: impl FnOnce(&mut Self) -> io::Result<()>) {
        if (self.interrupted)() {
            return;
        }
        (self.progress)(what);
        let t = Instant::now();
        match f(self) {
            Ok(()) => (self.progress)(&format!("  done in {:.1} s", t.elapsed().as_secs_f64())),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                (self.progress)(&format!("  FAILED: {e}"));
                self.failures.push((what.to_string(), e.to_string()));
            }
        }
    }

    /// 4.2's layout scores: 1.0 and the fragmented one for the tree mappings; HashFS has no
    /// allocator to fragment, so 1.0 only.
    fn scores(&self, m: MappingKind) -> Vec<f64> {
        if m.uses_allocator() {
            vec![1.0, self.cfg.fragmented_score]
        } else {
            vec![1.0]
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        e: &Experiment,
        param: String,
        op: &str,
        cache: &'static str,
        mapping: &str,
        metric: &'static str,
        samples: Vec<f64>,
    ) {
        if let Some(summary) = Summary::of(&samples) {
            self.rows.push(MapRow {
                experiment: e.id,
                figure: e.figure,
                param,
                op: op.to_string(),
                cache,
                mapping: mapping.to_string(),
                metric,
                summary,
                samples,
            });
        }
    }

    /// `n` samples of `f`, stopping at an interrupt.
    fn samples(
        &mut self,
        n: usize,
        mut f: impl FnMut(&mut Evictor) -> io::Result<f64>,
    ) -> io::Result<Vec<f64>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            if (self.interrupted)() {
                return Err(interrupted_error());
            }
            out.push(f(&mut self.ev)?);
        }
        Ok(out)
    }

    /// Hot samples: one more than the trials, the first (warming the caches) dropped.
    fn hot_samples(&mut self, mut f: impl FnMut() -> io::Result<f64>) -> io::Result<Vec<f64>> {
        let mut v = self.samples(self.cfg.trials + 1, |_| f())?;
        v.remove(0);
        Ok(v)
    }

    fn big_image_bytes(&self) -> u64 {
        let c = self.cfg;
        let appends = (c.hot_appends as u64)
            .max(c.thread_pairs as u64 * c.threads.iter().max().copied().unwrap_or(1) as u64)
            + c.cold_reps as u64;
        let files = c.file_sizes().iter().sum::<u64>();
        files + files / 8 + appends * BLOCK * 9 / 8 + (64 << 20)
    }

    /// The large-file image of `m`: 4.1, 4.3, 4.4, 4.6 and 4.7.
    fn big_image(&mut self, m: MappingKind) -> io::Result<()> {
        let score = Some(self.cfg.layout_score);
        let img = MapImage::create(&self.cfg.shm_dir, m, self.big_image_bytes(), score)?;
        let big = self.cfg.big_file_bytes;
        let big_ino = img.write_file("big", big)?;
        let mut files = Vec::new();
        for &b in &self.cfg.small_files {
            files.push((b, img.write_file(&format!("small-{b}"), b)?));
        }
        files.push((big, big_ino));
        let fs = img.fs();
        if self.cfg.runs("locality") {
            self.locality(m, fs, big_ino)?;
        }
        if self.cfg.runs("file-size") {
            self.file_size(m, fs, &files)?;
        }
        if self.cfg.runs("io-size") {
            self.io_size(m, fs, big_ino)?;
        }
        if self.cfg.runs("concurrency") {
            self.concurrency(m, fs, big_ino)?;
        }
        if self.cfg.runs("page-cache") && m == MappingKind::Extent {
            self.page_cache(fs, big_ino)?;
        }
        img.close()
    }

    /// Cold samples of every operation on `bench`, as rows of `e` at `param`.
    fn cold_rows(
        &mut self,
        e: &Experiment,
        param: &str,
        m: &str,
        bench: &mut Bench,
    ) -> io::Result<()> {
        let reps = self.cfg.cold_reps;
        for op in Op::ALL {
            let s = self.samples(self.cfg.trials, |ev| bench.cold(op, reps, ev))?;
            self.push(e, param.to_string(), op.name(), "cold", m, "cycles", s);
        }
        Ok(())
    }

    /// 4.1: cold and hot single-block operations on the large file.
    fn locality(&mut self, m: MappingKind, fs: &Fs, ino: u64) -> io::Result<()> {
        let e = exp("locality");
        let param = param::file(self.cfg.big_file_bytes);
        let mut b = Bench::new(fs, ino, self.cfg.big_file_bytes, self.cfg.seed)?;
        self.cold_rows(e, &param, m.name(), &mut b)?;
        for op in Op::ALL {
            let n = self.hot_count(op);
            let s = self.hot_samples(|| b.hot(op, n))?;
            self.push(e, param.clone(), op.name(), "hot", m.name(), "cycles", s);
        }
        Ok(())
    }

    fn hot_count(&self, op: Op) -> u32 {
        match op {
            Op::Append => self.cfg.hot_appends,
            _ => self.cfg.hot_ops,
        }
    }

    /// 4.3: cold operations on files of each size.
    fn file_size(&mut self, m: MappingKind, fs: &Fs, files: &[(u64, u64)]) -> io::Result<()> {
        let e = exp("file-size");
        for &(bytes, ino) in files {
            let mut b = Bench::new(fs, ino, bytes, self.cfg.seed ^ bytes)?;
            self.cold_rows(e, &param::file(bytes), m.name(), &mut b)?;
        }
        Ok(())
    }

    /// 4.4: cold reads of each size, sequential and random: the mapping's cycles, the whole
    /// read's, and the mapping's share of it.
    fn io_size(&mut self, m: MappingKind, fs: &Fs, ino: u64) -> io::Result<()> {
        let e = exp("io-size");
        let mut b = Bench::new(fs, ino, self.cfg.big_file_bytes, self.cfg.seed ^ 44)?;
        let mut buf = vec![0u8; self.cfg.io_sizes.iter().copied().max().unwrap_or(BLOCK) as usize];
        for io in self.cfg.io_sizes.clone() {
            for (op, seq) in [(Op::SeqRead, true), (Op::RandRead, false)] {
                let io_blocks = io.div_ceil(BLOCK) as u32;
                let (mut map, mut read, mut share) = (Vec::new(), Vec::new(), Vec::new());
                let reps = self.cfg.cold_reps;
                for _ in 0..self.cfg.trials {
                    if (self.interrupted)() {
                        return Err(interrupted_error());
                    }
                    let (a, r) = b.cold_read_path(io_blocks, seq, reps, &mut buf, &mut self.ev)?;
                    map.push(a);
                    read.push(r);
                    share.push(a / r.max(1.0));
                }
                let p = param::io(io);
                self.push(e, p.clone(), op.name(), "cold", m.name(), "cycles", map);
                self.push(
                    e,
                    p.clone(),
                    op.name(),
                    "cold",
                    m.name(),
                    "read-path cycles",
                    read,
                );
                self.push(e, p, op.name(), "cold", m.name(), "mapping share", share);
            }
        }
        Ok(())
    }

    /// 4.6: threads reading and appending the large file at once.
    fn concurrency(&mut self, m: MappingKind, fs: &Fs, ino: u64) -> io::Result<()> {
        let e = exp("concurrency");
        let file = fs.mapping_probe().file(ino)?;
        let blocks = self.cfg.big_file_bytes.div_ceil(BLOCK) as u32;
        for t in self.cfg.threads.clone() {
            let (mut reads, mut appends) = (Vec::new(), Vec::new());
            let pairs = self.cfg.thread_pairs;
            let seed = self.cfg.seed;
            let mut shared = self.hot_samples(|| {
                let s = threads::run(file, blocks, t, pairs, seed)?;
                appends.push(s.append);
                Ok(s.read)
            })?;
            appends.remove(0);
            reads.append(&mut shared);
            let p = param::threads(t);
            self.push(
                e,
                p.clone(),
                Op::RandRead.name(),
                "hot",
                m.name(),
                "cycles",
                reads,
            );
            self.push(e, p, Op::Append.name(), "hot", m.name(), "cycles", appends);
        }
        Ok(())
    }

    /// 4.7: hot operations on the PM extent tree and on its page-cached copy.
    fn page_cache(&mut self, fs: &Fs, ino: u64) -> io::Result<()> {
        let e = exp("page-cache");
        let bytes = self.cfg.big_file_bytes;
        let p = param::file(bytes);
        let mut b = Bench::new(fs, ino, bytes, self.cfg.seed ^ 47)?;
        let (file, blocks) = (b.file(), b.blocks());
        for op in Op::ALL {
            let n = self.hot_count(op);
            let pm = self.hot_samples(|| b.hot(op, n))?;
            self.push(e, p.clone(), op.name(), "hot", "extent", "cycles", pm);
            let mut rng = fastrand::Rng::with_seed(self.cfg.seed ^ 74);
            let cached = self.hot_samples(|| {
                let mut c = PageCachedExtents::new(file);
                page_cached_run(&mut c, op, blocks, n, &mut rng)
            })?;
            self.push(
                e,
                p.clone(),
                op.name(),
                "hot",
                "extent+page-cache",
                "cycles",
                cached,
            );
        }
        Ok(())
    }

    /// 4.2: cold operations on a large file at layout score `score`.
    fn fragmentation(&mut self, m: MappingKind, score: f64) -> io::Result<()> {
        let e = exp("fragmentation");
        let big = self.cfg.big_file_bytes;
        let bytes = big + big / 4 + (64 << 20);
        let img = MapImage::create(&self.cfg.shm_dir, m, bytes, Some(score))?;
        let ino = img.write_file("big", big)?;
        let mut b = Bench::new(img.fs(), ino, big, self.cfg.seed ^ 42)?;
        self.cold_rows(e, &param::score(score), m.name(), &mut b)?;
        img.close()
    }

    /// 4.5: cold operations on a file written after filling the image to `fill`.
    fn utilisation(&mut self, m: MappingKind, fill: f64) -> io::Result<()> {
        let e = exp("utilisation");
        let c = self.cfg;
        let mut img = MapImage::create(&c.shm_dir, m, c.util_image_bytes, Some(c.layout_score))?;
        let file_blocks = c.util_file_bytes.div_ceil(BLOCK);
        img.fill_to(fill, file_blocks + c.cold_reps as u64)?;
        let ino = img.write_file("measured", c.util_file_bytes)?;
        let reached = img.fullness();
        if (reached - fill).abs() > 0.01 {
            self.notes.push(format!(
                "utilisation on {m}: asked {}, reached {:.1}% (mapping nodes count as used)",
                param::fill(fill),
                reached * 100.0
            ));
        }
        let p = param::fill(fill);
        let mut b = Bench::new(img.fs(), ino, c.util_file_bytes, c.seed ^ 45)?;
        self.cold_rows(e, &p, m.name(), &mut b)?;
        let mut buf = vec![0u8; BLOCK as usize];
        let reps = c.cold_reps;
        let share = self.samples(c.trials, |ev| {
            let (a, r) = b.cold_read_path(1, false, reps, &mut buf, ev)?;
            Ok(a / r.max(1.0))
        })?;
        self.push(
            e,
            p,
            Op::RandRead.name(),
            "cold",
            m.name(),
            "mapping share",
            share,
        );
        img.close()
    }

    /// 4.8 (and 4.9 on level hashing): a Table 2 personality through the lab's Filebench
    /// engine on an image of `m`, as rows of `e`.
    fn filebench(&mut self, e: &Experiment, p: Personality, m: MappingKind) -> io::Result<()> {
        let c = self.cfg;
        let mut personality = table2(p, c.filebench.files);
        if let Some(t) = c.filebench.threads {
            personality.threads = t;
        }
        let run = RunConfig {
            personality,
            trials: c.filebench.trials,
            extra_trials: c.filebench.extra_trials,
            warmup_seconds: c.filebench.warmup_seconds,
            run_seconds: c.filebench.run_seconds,
            ops_max: None,
            seed: c.seed,
            hold_placement: c.filebench.hold_placement,
        };
        let image = crate::study::targets::filebench_image(&run);
        let opts = FormatOptions {
            size_bytes: image.bytes,
            inode_count: Some(image.inodes),
            mapping: m,
            layout_score: m.uses_allocator().then_some(c.layout_score),
            tier: None,
        };
        let path = c
            .shm_dir
            .join(crate::study::targets::scratch_name("-filebench.img"));
        let mut target = NvmfsTarget::create_with(path, &opts)?;
        let result = filebench::run(&mut target, &run, self.interrupted, &mut |_| {})?;
        target.close()?;
        if let Some(why) = &result.stopped_early {
            return Err(io::Error::other(format!("stopped early: {why}")));
        }
        let kept = filebench::kept_ops_per_sec(&result.trials);
        self.push(e, "Table 2".into(), p.name(), "-", m.name(), "ops/s", kept);
        Ok(())
    }
}

/// Table 2 of the paper with `files` files (the paper: 1,000); fileserver 128 KB mean, 1 MB
/// reads, 16 KB appends; webproxy 16 KB files, 16 KB reads and appends. Threads and the rest:
/// Filebench's defaults.
pub fn table2(p: Personality, files: usize) -> PersonalityConfig {
    let mut c = PersonalityConfig::defaults(p);
    c.files = files;
    c.append_size_bytes = 16 << 10;
    match p {
        Personality::Fileserver => {
            c.mean_file_size_bytes = 128 << 10;
            c.iosize_bytes = 1 << 20;
        }
        _ => {
            c.mean_file_size_bytes = 16 << 10;
            c.iosize_bytes = 16 << 10;
        }
    }
    c
}

/// Mean cycles of `n` hot operations through a page-cached copy opened just before.
fn page_cached_run(
    c: &mut PageCachedExtents,
    op: Op,
    blocks: u32,
    n: u32,
    rng: &mut fastrand::Rng,
) -> io::Result<f64> {
    let t = match op {
        Op::SeqRead => {
            let mut l = rng.u32(0..blocks);
            let t0 = now();
            for _ in 0..n {
                black_box(c.lookup(l));
                l += 1;
                if l == blocks {
                    l = 0;
                }
            }
            now() - t0
        }
        Op::RandRead => {
            let picks: Vec<u32> = (0..n).map(|_| rng.u32(0..blocks)).collect();
            let t0 = now();
            for &l in &picks {
                black_box(c.lookup(l));
            }
            now() - t0
        }
        Op::Append => {
            let t0 = now();
            for j in 0..n {
                c.append(blocks + j)?;
            }
            let t = now() - t0;
            c.trim(blocks, blocks + n)?;
            t
        }
    };
    Ok(t as f64 / n.max(1) as f64)
}
