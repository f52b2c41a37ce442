//! xFullPathname: the canonical name of a database inside the image, as the unix VFS makes it
//! (`unixFullPathname`): relative names are taken from "/", ".", ".." and repeated slashes are
//! folded, and every symlink along the way is resolved (at most 100), so a database opened
//! through a symlink keeps its journal and WAL next to the real file. Components that do not
//! exist are kept as written (the file may be about to be created).

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;

use nvmfs::Fs;

/// Symlinks followed at most (os_unix.c `SQLITE_MAX_SYMLINK`).
const MAX_SYMLINKS: usize = 100;

/// The absolute, symlink-free form of `name` (bytes, not necessarily UTF-8), and whether a
/// symlink was followed to get it.
pub(crate) fn full_path(fs: &Fs, name: &[u8]) -> io::Result<(Vec<u8>, bool)> {
    let mut todo: Vec<Vec<u8>> = components(name).rev().collect();
    let mut done: Vec<Vec<u8>> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == b".." {
            done.pop();
            continue;
        }
        done.push(c);
        let here = join(&done);
        let p = OsStr::from_bytes(&here);
        let is_link = fs.symlink_metadata(p).is_ok_and(|m| m.is_symlink());
        if !is_link {
            continue;
        }
        links += 1;
        if links > MAX_SYMLINKS {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        let target = fs.read_link(p)?;
        let target = target.as_os_str().as_bytes();
        done.pop();
        if target.starts_with(b"/") {
            done.clear();
        }
        todo.extend(components(target).rev());
    }
    Ok((join(&done), links > 0))
}

fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = Vec<u8>> + '_ {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
}

fn join(parts: &[Vec<u8>]) -> Vec<u8> {
    if parts.is_empty() {
        return b"/".to_vec();
    }
    parts
        .iter()
        .flat_map(|p| [&b"/"[..], p])
        .flatten()
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmfs::FormatOptions;

    #[test]
    fn folds_dots_and_resolves_symlinks() {
        let fs = Fs::format_in_memory(&FormatOptions {
            size_bytes: 4 << 20,
            inode_count: None,
            ..Default::default()
        })
        .unwrap();
        fs.create_dir_all("/data/real").unwrap();
        fs.symlink_path("/data/real", "/data/link").unwrap();
        fs.symlink_path("real/../real", "/data/rel").unwrap();
        fs.symlink_path("loop", "/loop").unwrap();
        let full = |p: &str| {
            let (path, followed) = full_path(&fs, p.as_bytes()).unwrap();
            assert_eq!(followed, p.contains("link") || p.contains("rel"), "{p}");
            String::from_utf8(path).unwrap()
        };
        assert_eq!(full("db"), "/db");
        assert_eq!(full("//a/./b/../c"), "/a/c");
        assert_eq!(full("/.."), "/");
        assert_eq!(full("/data/link/x.db"), "/data/real/x.db");
        assert_eq!(full("data/rel/x.db-wal"), "/data/real/x.db-wal");
        assert_eq!(full("/missing/dir/x.db"), "/missing/dir/x.db");
        let e = full_path(&fs, b"/loop/x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    }
}
