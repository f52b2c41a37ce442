//! Mount refuses damaged or busy images with a clear error and never panics.

use nvmfs::{FormatOptions, Fs, MountOptions};

fn image() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("img");
    Fs::format(
        &p,
        &FormatOptions {
            size_bytes: 8 << 20,
            inode_count: None,
            ..Default::default()
        },
    )
    .unwrap();
    (d, p)
}

fn mount_err(p: &std::path::Path) -> String {
    match Fs::mount(p, &MountOptions::default()) {
        Ok(_) => panic!("mount of a damaged image succeeded"),
        Err(e) => e.to_string(),
    }
}

fn patch(p: &std::path::Path, off: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .unwrap()
        .write_all_at(bytes, off)
        .unwrap();
}

#[test]
fn bad_magic_in_both_superblocks_is_refused() {
    let (_d, p) = image();
    patch(&p, 0, b"garbage!");
    patch(&p, 4096, b"garbage!");
    let e = mount_err(&p);
    assert!(
        e.contains("superblock") && e.contains("magic") && e.contains("offset 0"),
        "{e}"
    );
}

#[test]
fn damaged_primary_falls_back_to_replica() {
    let (_d, p) = image();
    patch(&p, 100, &[0xff; 8]);
    let fs = Fs::mount(&p, &MountOptions::default()).unwrap();
    assert!(fs.recovery_report().used_replica);
    fs.write_file("/x", b"still works").unwrap();
}

#[test]
fn bad_geometry_with_valid_checksum_is_refused() {
    let (_d, p) = image();
    let mut sb = std::fs::read(&p).unwrap()[..4096].to_vec();
    // data_blocks (offset 104) far past the end, checksum recomputed (a JANUS-style mutation).
    sb[104..112].copy_from_slice(&(1u64 << 35).to_le_bytes());
    let crc = crc32c_of(&sb[..4092]);
    sb[4092..].copy_from_slice(&crc.to_le_bytes());
    patch(&p, 0, &sb);
    patch(&p, 4096, &sb);
    let e = mount_err(&p);
    assert!(e.contains("superblock"), "{e}");
}

fn crc32c_of(b: &[u8]) -> u32 {
    // Bitwise CRC-32C (Castagnoli), enough for a test.
    let mut crc = !0u32;
    for &x in b {
        crc ^= x as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn truncated_and_empty_files_are_refused() {
    let (_d, p) = image();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    assert!(mount_err(&p).contains("superblock"));
    std::fs::write(&p, b"").unwrap();
    assert!(mount_err(&p).contains("too small"));
}

#[test]
fn second_read_write_mount_is_refused() {
    let (_d, p) = image();
    let fs = Fs::mount(&p, &MountOptions::default()).unwrap();
    let e = mount_err(&p);
    assert!(e.contains("in use"), "{e}");
    fs.unmount().unwrap();
    Fs::mount(&p, &MountOptions::default()).unwrap();
}

#[test]
fn read_only_mount_of_unclean_image_is_refused() {
    let (_d, p) = image();
    let fs = Fs::mount(&p, &MountOptions::default()).unwrap();
    fs.write_file("/f", b"x").unwrap();
    fs.drop_without_unmount();
    let e = Fs::mount(
        &p,
        &MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("recovery"), "{e}");
    let fs = Fs::mount(&p, &MountOptions::default()).unwrap();
    assert!(fs.recovery_report().unclean);
    fs.unmount().unwrap();
    let ro = Fs::mount(
        &p,
        &MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(ro.read_file("/f").unwrap(), b"x");
    assert_eq!(
        ro.write_file("/g", b"y").unwrap_err().raw_os_error(),
        Some(libc::EROFS)
    );
}

#[test]
fn random_garbage_images_never_panic() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("junk");
    let mut x = 0x1234_5678_9abc_def0u64;
    for round in 0..50 {
        let mut bytes = vec![0u8; 1 << 20];
        for b in bytes.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        if round % 2 == 0 {
            bytes[..8].copy_from_slice(b"NVMFS\0PM");
        }
        std::fs::write(&p, &bytes).unwrap();
        assert!(Fs::mount(&p, &MountOptions::default()).is_err());
        assert!(!nvmfs::fsck::check_image(&p).unwrap().is_clean());
    }
}

#[test]
fn format_refuses_an_image_larger_than_the_free_space() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("img");
    let free = fs_free_bytes(d.path());
    let size = (free + (1 << 30)).next_multiple_of(4096);
    let e = Fs::format(
        &p,
        &FormatOptions {
            size_bytes: size,
            inode_count: None,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
    assert!(e.to_string().contains("does not fit"), "{e}");
    // Nothing was allocated.
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
}

fn fs_free_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: valid path, and statvfs fills the struct it is given.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
    // SAFETY: initialised by the successful call.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // u32 fields on some targets
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    free
}

#[test]
fn a_forked_child_does_not_keep_the_lock_after_unmount() {
    let (_d, p) = image();
    let fs = Fs::mount(&p, &MountOptions::default()).unwrap();
    // A child forked while the image is mounted shares the locked open file description
    // (another thread of a process forking for mkfs or mount does this); it outlives the
    // unmount here, as a child between fork and exec can.
    // SAFETY: the child only sleeps and exits, both async-signal-safe.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        unsafe {
            libc::sleep(3);
            libc::_exit(0);
        }
    }
    fs.unmount().unwrap();
    let again = Fs::mount(&p, &MountOptions::default());
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, &mut status, 0);
    }
    again.expect("the unmount released the lock although a forked child still has the file");
}
