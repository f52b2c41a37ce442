//! The images of the mapping study: a fresh nvmfs image per mapping (and layout score) in a
//! tmpfs, files written the way an application writes them (sequential 1 MiB writes), and
//! filler files that bring the image to a given fullness (section 4.5).

use crate::study::targets::scratch_name;
use crate::targets::nvmfs::NvmfsTarget;
use nvmfs::{FormatOptions, Fs, MappingKind};
use std::io;
use std::path::Path;

/// nvmfs's block size.
pub const BLOCK: u64 = 4096;

/// A mounted scratch image, deleted on drop.
pub struct MapImage {
    target: NvmfsTarget,
    fillers: usize,
}

impl MapImage {
    /// Formats `bytes` in `shm_dir` with `mapping` (and, for the tree mappings, a layout score).
    pub fn create(
        shm_dir: &Path,
        mapping: MappingKind,
        bytes: u64,
        layout_score: Option<f64>,
    ) -> io::Result<MapImage> {
        let opts = FormatOptions {
            size_bytes: bytes,
            inode_count: Some((bytes / (64 << 10)).clamp(256, 1 << 20)),
            mapping,
            layout_score: layout_score.filter(|_| mapping.uses_allocator()),
            tier: None,
        };
        let path = shm_dir.join(scratch_name(&format!("-{mapping}.img")));
        Ok(MapImage {
            target: NvmfsTarget::create_with(path, &opts)?,
            fillers: 0,
        })
    }

    pub fn fs(&self) -> &Fs {
        self.target.fs()
    }

    /// Writes `/name` of `bytes` in 1 MiB writes and returns its inode number.
    pub fn write_file(&self, name: &str, bytes: u64) -> io::Result<u64> {
        let path = format!("/{name}");
        let f = nvmfs::OpenOptions::new()
            .write(true)
            .create(true)
            .open(self.fs(), &path)?;
        let chunk = vec![0xA5u8; 1 << 20];
        let mut at = 0;
        while at < bytes {
            let n = (bytes - at).min(chunk.len() as u64) as usize;
            f.write_all_at(&chunk[..n], at)?;
            at += n as u64;
        }
        drop(f);
        Ok(self.fs().metadata(&path)?.ino)
    }

    /// The share of the image's blocks in use.
    pub fn fullness(&self) -> f64 {
        let (used, total) = self.fs().mapping_probe().used_and_total_blocks();
        used as f64 / total.max(1) as f64
    }

    /// Adds 1 MiB filler files (the last one shorter) until `fraction` of the blocks are in
    /// use, leaving `keep_free` blocks more than that free.
    pub fn fill_to(&mut self, fraction: f64, keep_free: u64) -> io::Result<()> {
        let (_, total) = self.fs().mapping_probe().used_and_total_blocks();
        let goal = ((total as f64 * fraction) as u64).saturating_sub(keep_free);
        loop {
            let (used, _) = self.fs().mapping_probe().used_and_total_blocks();
            if used >= goal {
                return Ok(());
            }
            let blocks = (goal - used).min(256);
            self.fillers += 1;
            self.write_file(&format!("filler-{}", self.fillers), blocks * BLOCK)?;
        }
    }

    /// Unmounts and deletes the image, reporting an unmount error.
    pub fn close(self) -> io::Result<()> {
        self.target.close()
    }
}
