//! The `nvmfs` target: the library in-process on a fresh image file.

use crate::targets::api::{MicroFile, MicroFs, MicroMap};
use crate::targets::sys::{annotate, ScratchFile};
use nvmfs::{DirectMap, File, FormatOptions, Fs, MountOptions, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A freshly formatted and mounted nvmfs image. Dropping it unmounts and
/// deletes the image, so nothing is left behind on error either.
pub struct NvmfsTarget {
    // Declared before `image`: fields drop in order, but `Drop` below
    // unmounts explicitly first anyway.
    fs: Option<Fs>,
    image: ScratchFile,
}

impl NvmfsTarget {
    /// Formats `image` (which must not exist yet) and mounts it.
    pub fn create(image: PathBuf, size_bytes: u64, inode_count: u64) -> io::Result<Self> {
        let opts = FormatOptions {
            size_bytes,
            inode_count: Some(inode_count),
            ..Default::default()
        };
        NvmfsTarget::create_with(image, &opts)
    }

    /// Formats `image` (which must not exist yet) with `opts` (a mapping, a layout score)
    /// and mounts it.
    pub fn create_with(image: PathBuf, opts: &FormatOptions) -> io::Result<Self> {
        let image = format_scratch_with(image, opts)?;
        let fs = mount_image(image.path(), &MountOptions::default())?;
        Ok(NvmfsTarget {
            fs: Some(fs),
            image,
        })
    }

    /// Unmounts cleanly, reporting errors (the image is deleted on drop).
    pub fn close(mut self) -> io::Result<()> {
        match self.fs.take() {
            Some(fs) => fs.unmount(),
            None => Ok(()),
        }
    }

    /// Unmounts cleanly and mounts the image again, the nvmfs counterpart of
    /// remounting a kernel file system between trials. nvmfs has no page
    /// cache, so what this resets is the DRAM state rebuilt at mount
    /// (directory indexes, translation caches, allocator pools).
    pub fn remount(&mut self) -> io::Result<()> {
        if let Some(fs) = self.fs.take() {
            fs.unmount()
                .map_err(|e| annotate(e, "cannot unmount nvmfs image", self.image.path()))?;
        }
        self.fs = Some(mount_image(self.image.path(), &MountOptions::default())?);
        Ok(())
    }

    /// The image file.
    pub fn image_path(&self) -> &std::path::Path {
        self.image.path()
    }

    /// The mounted file system.
    pub fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("mounted until closed")
    }
}

impl Drop for NvmfsTarget {
    fn drop(&mut self) {
        if let Some(fs) = self.fs.take() {
            if let Err(e) = fs.unmount() {
                eprintln!("warning: unmounting {}: {e}", self.image.path().display());
            }
        }
    }
}

impl MicroFs for NvmfsTarget {
    type Name = String;
    type File = File;
    type Map = DirectMap;

    fn name(&self, rel: &str) -> String {
        format!("/{}", rel.trim_start_matches('/'))
    }

    fn mkdir(&self, name: &String) -> io::Result<()> {
        self.fs().create_dir(name.as_str())
    }

    fn rmdir(&self, name: &String) -> io::Result<()> {
        self.fs().remove_dir(name.as_str())
    }

    fn create(&self, name: &String) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.fs(), name.as_str())
    }

    fn open_read(&self, name: &String) -> io::Result<File> {
        OpenOptions::new().read(true).open(self.fs(), name.as_str())
    }

    fn open_rw(&self, name: &String) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.fs(), name.as_str())
    }

    fn open_append(&self, name: &String) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .append(true)
            .create(true)
            .open(self.fs(), name.as_str())
    }

    fn stat(&self, name: &String) -> io::Result<u64> {
        self.fs().metadata(name.as_str()).map(|m| m.len())
    }

    fn unlink(&self, name: &String) -> io::Result<()> {
        self.fs().remove_file(name.as_str())
    }

    fn map(&self, file: &File) -> io::Result<DirectMap> {
        file.map_direct()
    }

    /// Every nvmfs write is durable and atomic when it returns: O_SYNC asks for nothing more.
    fn open_sync(&self, name: &String, create: bool) -> io::Result<File> {
        if create {
            self.create(name)
        } else {
            self.open_rw(name)
        }
    }
}

/// nvmfs has no mmap: its direct-access map is the DAX counterpart (block pointers resolved
/// once at map time, loads and stores copy straight to and from the media).
impl MicroMap for DirectMap {
    fn len(&self) -> u64 {
        DirectMap::len(self)
    }

    fn load(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        DirectMap::load(self, offset, buf)
    }

    fn store(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        DirectMap::store(self, offset, buf)
    }

    fn sync(&mut self) -> io::Result<()> {
        DirectMap::sync(self)
    }
}

impl MicroFile for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        File::read_at(self, buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        File::write_at(self, buf, offset)
    }

    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf)
    }

    fn sync(&self) -> io::Result<()> {
        self.sync_all()
    }

    fn size(&self) -> io::Result<u64> {
        self.metadata().map(|m| m.len())
    }
}

impl crate::filebench::LabTarget for NvmfsTarget {
    type Fs = NvmfsTarget;

    fn fs(&self) -> &NvmfsTarget {
        self
    }

    fn remount(&mut self) -> io::Result<bool> {
        NvmfsTarget::remount(self).map(|()| true)
    }
}

/// Mounts `image`, naming it in the error. (A child process forked meanwhile by another
/// thread shares the image's descriptor until its exec, but `Fs::format` and unmount release
/// the lock explicitly, so a mount right after them is not refused.)
pub(crate) fn mount_image(image: &Path, opts: &MountOptions) -> io::Result<Fs> {
    Fs::mount(image, opts).map_err(|e| annotate(e, "cannot mount nvmfs image", image))
}

/// Claims `image` (which must not exist yet) and formats it; the image is
/// deleted when the returned value drops.
pub(crate) fn format_scratch(
    image: PathBuf,
    size_bytes: u64,
    inode_count: u64,
) -> io::Result<ScratchFile> {
    let opts = FormatOptions {
        size_bytes,
        inode_count: Some(inode_count),
        ..Default::default()
    };
    format_scratch_with(image, &opts)
}

/// Claims `image` (which must not exist yet) and formats it with `opts`; the image is
/// deleted when the returned value drops.
pub(crate) fn format_scratch_with(image: PathBuf, opts: &FormatOptions) -> io::Result<ScratchFile> {
    let image = ScratchFile::claim(image)?;
    Fs::format(image.path(), opts)
        .map_err(|e| annotate(e, "cannot format nvmfs image", image.path()))?;
    Ok(image)
}
