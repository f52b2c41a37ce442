//! nvmfs errors as LevelDB statuses.
//!
//! nvmfs reports errno values (`io::Error::from_raw_os_error`), and damaged media as
//! `InvalidData`. LevelDB decides on the status code, not the message: recovery creates a
//! database when reading `CURRENT` fails with `NotFound`, and the lock path reports "held by
//! another instance" only for `LockError`. So the code must follow the error's kind; the
//! message keeps the operation, the path and the errno text for people.

use std::io;
use std::path::Path;

use rusty_leveldb::{Status, StatusCode};

/// The status for `e`, raised by `op` on `path`.
pub(crate) fn status(op: &str, path: &Path, e: &io::Error) -> Status {
    Status::new(code_of(e), &format!("{op} {}: {e}", path.display()))
}

/// The LevelDB status code closest to an I/O error's kind.
pub(crate) fn code_of(e: &io::Error) -> StatusCode {
    use io::ErrorKind as K;
    match e.kind() {
        K::NotFound => StatusCode::NotFound,
        K::AlreadyExists => StatusCode::AlreadyExists,
        K::PermissionDenied | K::ReadOnlyFilesystem => StatusCode::PermissionDenied,
        K::InvalidInput | K::InvalidFilename | K::NotADirectory | K::IsADirectory => {
            StatusCode::InvalidArgument
        }
        // nvmfs's word for a structure that failed validation on the media.
        K::InvalidData => StatusCode::Corruption,
        K::Unsupported => StatusCode::NotSupported,
        _ => StatusCode::IOError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(n: i32) -> io::Error {
        io::Error::from_raw_os_error(n)
    }

    #[test]
    fn errno_values_map_to_their_status_codes() {
        let cases = [
            (2, StatusCode::NotFound),          // ENOENT
            (17, StatusCode::AlreadyExists),    // EEXIST
            (13, StatusCode::PermissionDenied), // EACCES
            (30, StatusCode::PermissionDenied), // EROFS
            (22, StatusCode::InvalidArgument),  // EINVAL
            (20, StatusCode::InvalidArgument),  // ENOTDIR
            (95, StatusCode::NotSupported),     // EOPNOTSUPP
            (28, StatusCode::IOError),          // ENOSPC
            (5, StatusCode::IOError),           // EIO
        ];
        for (n, want) in cases {
            assert_eq!(code_of(&errno(n)), want, "errno {n}");
        }
        let damaged = io::Error::new(io::ErrorKind::InvalidData, "inode 7: bad type");
        assert_eq!(code_of(&damaged), StatusCode::Corruption);
    }

    #[test]
    fn the_message_names_the_operation_and_the_path() {
        let s = status("delete", Path::new("db/000005.ldb"), &errno(2));
        assert_eq!(s.code, StatusCode::NotFound);
        assert!(s.err.contains("delete db/000005.ldb"), "{}", s.err);
    }
}
