//! FUSE over io_uring (Linux 6.14+, `-o io_uring`): one queue per possible CPU, each served
//! by one thread pinned to that CPU. The kernel puts a request on the queue of the CPU that
//! issued it, so the application and the thread serving it share a CPU: no cross-CPU
//! wake-up per request, which is most of a /dev/fuse round trip on a small VM.
//!
//! Protocol (Documentation/filesystems/fuse-io-uring.rst): after FUSE_INIT granted
//! FUSE_OVER_IO_URING, every ring entry is registered with an IORING_OP_URING_CMD
//! (FUSE_IO_URING_CMD_REGISTER) carrying two buffers: a 288-byte header (`fuse_in_header`
//! in `in_out`, the operation's own argument struct in `op_in`, and `ring_ent_in_out` with
//! the commit id and payload size) and a payload buffer (names, write data). Its completion
//! means a request is in the buffers; the reply goes back the same way (`fuse_out_header`
//! in `in_out`, reply arguments in the payload) with FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
//! which also waits for the entry's next request. The kernel switches from /dev/fuse to the
//! rings once every queue has an entry; until then, and for interrupts and forgets, the
//! /dev/fuse threads serve.
//!
//! Requests are handed to fuser's parser and our adapter through `fuser::RawDispatcher`
//! (vendor/fuser/NVMFS.md). It wants a request laid out as a /dev/fuse read delivers it, so
//! each entry's payload buffer sits one page into its mapping and the header and argument
//! struct are copied into the end of that page: header, arguments and payload are then
//! contiguous without copying the payload (up to 1 MiB of write data).

// The kernel's FUSE and io_uring structures are in the host's byte order, unlike nvmfs's
// on-media format (which the workspace's host_endian_bytes lint guards).
#![allow(clippy::host_endian_bytes)]

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use fuser::{RawDispatcher, RawReplySink};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use log::{debug, warn};

use crate::{NvmFuse, Shutdown};

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: in_out[128], op_in[128], ring_ent_in_out (32 bytes).
const HEADER_LEN: usize = 288;
const OP_IN: usize = 128;
const OP_IN_MAX: usize = 128;
const COMMIT_ID: usize = 256 + 8;
const PAYLOAD_SZ: usize = 256 + 16;
/// `struct fuse_in_header` and `struct fuse_out_header`.
const IN_HEADER_LEN: usize = 40;
const OUT_HEADER_LEN: usize = 16;
/// Room before the payload for the header and argument struct of the request.
const PREFIX: usize = 4096;
/// Ring entries per queue: requests the kernel can hand a queue before it holds them.
const DEPTH: usize = 8;

/// The number of queues the kernel makes: `num_possible_cpus()`.
pub fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| count_cpu_list(s.trim()))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// CPUs in a kernel CPU list such as "0-3,8,10-11".
fn count_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0;
    for part in s.split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => part.parse::<usize>().map(|_| 1).ok()?,
        };
    }
    Some(n)
}

/// Starts one serving thread per queue on `fuse` (the session's /dev/fuse, duplicated).
/// `max_payload` is the largest request or reply argument (max_write, max_pages). Each thread
/// adds the requests it served to `counts` when it ends.
pub fn start(
    fuse: OwnedFd,
    dispatcher: RawDispatcher<NvmFuse>,
    max_payload: usize,
    counts: Shutdown,
) -> Vec<JoinHandle<io::Result<()>>> {
    let fuse = Arc::new(fuse);
    let queues = possible_cpus();
    let mut threads = Vec::with_capacity(queues);
    for qid in 0..queues {
        let (fuse, d, counts) = (fuse.clone(), dispatcher.clone(), counts.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("nvmfs-uring-{qid}"))
            .spawn(move || {
                let mut served = 0;
                if let Err(e) = serve_queue(&fuse, qid as u16, max_payload, &d, &mut served) {
                    warn!("FUSE over io_uring, queue {qid}: {e}; requests stay on /dev/fuse");
                }
                counts.add_io_uring_requests(served);
                Ok(())
            });
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => warn!("FUSE over io_uring: cannot start queue {qid}'s thread: {e}"),
        }
    }
    threads
}

/// One ring entry's buffers: the header page and the payload mapping (PREFIX + payload).
struct Entry {
    header: Mapping,
    data: Mapping,
    iov: [libc::iovec; 2],
    sink: Arc<EntrySink>,
}

impl Entry {
    fn new(max_payload: usize) -> io::Result<Entry> {
        let header = Mapping::new(4096)?;
        let data = Mapping::new(PREFIX + max_payload)?;
        let payload = unsafe { data.ptr.as_ptr().add(PREFIX) };
        let iov = [
            libc::iovec {
                iov_base: header.ptr.as_ptr().cast(),
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: payload.cast(),
                iov_len: max_payload,
            },
        ];
        let sink = Arc::new(EntrySink {
            header: header.ptr,
            payload: NonNull::new(payload).expect("mapping is not null"),
            cap: max_payload,
            armed: AtomicBool::new(false),
        });
        Ok(Entry {
            header,
            data,
            iov,
            sink,
        })
    }

    fn header(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.header.ptr.as_ptr(), HEADER_LEN) }
    }

    fn unique(&self) -> u64 {
        u64::from_ne_bytes(self.header()[8..16].try_into().unwrap())
    }

    fn commit_id(&self) -> u64 {
        u64::from_ne_bytes(self.header()[COMMIT_ID..COMMIT_ID + 8].try_into().unwrap())
    }

    /// The request as one /dev/fuse-style buffer (see the module comment), or why not.
    fn request(&mut self, scratch: &mut Vec<u64>) -> Result<&[u8], String> {
        let h = self.header();
        let len = u32::from_ne_bytes(h[0..4].try_into().unwrap()) as usize;
        let payload = u32::from_ne_bytes(h[PAYLOAD_SZ..PAYLOAD_SZ + 4].try_into().unwrap());
        let payload = payload as usize;
        let op_len = len
            .checked_sub(IN_HEADER_LEN + payload)
            .filter(|&n| n <= OP_IN_MAX && payload <= self.sink.cap)
            .ok_or_else(|| format!("request length {len} does not fit payload {payload}"))?;
        let start = PREFIX - IN_HEADER_LEN - op_len;
        let base = self.data.ptr.as_ptr();
        unsafe {
            let dst = base.add(start);
            std::ptr::copy_nonoverlapping(h.as_ptr(), dst, IN_HEADER_LEN);
            std::ptr::copy_nonoverlapping(h[OP_IN..].as_ptr(), dst.add(IN_HEADER_LEN), op_len);
        }
        let whole = unsafe { std::slice::from_raw_parts(base.add(start), len) };
        if start.is_multiple_of(8) {
            return Ok(whole);
        }
        // fuser reads the header's u64 fields in place: an argument struct whose size is not
        // a multiple of 8 leaves the header unaligned, so copy the request once more.
        scratch.clear();
        scratch.resize(len.div_ceil(8), 0);
        let s = unsafe { std::slice::from_raw_parts_mut(scratch.as_mut_ptr().cast::<u8>(), len) };
        s.copy_from_slice(whole);
        Ok(s)
    }
}

/// An anonymous private mapping (page aligned, as the kernel pins the pages it copies to).
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> io::Result<Mapping> {
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap does not return null"),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Writes a reply into its ring entry. Armed while the entry's request is being dispatched:
/// a reply that came after the entry was committed (or a second reply) is refused instead
/// of overwriting the entry's next request.
struct EntrySink {
    header: NonNull<u8>,
    payload: NonNull<u8>,
    cap: usize,
    armed: AtomicBool,
}

// The pointers are into the entry's mappings, which outlive every reply sent while armed.
unsafe impl Send for EntrySink {}
unsafe impl Sync for EntrySink {}

impl RawReplySink for EntrySink {
    fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        if !self.armed.swap(false, Ordering::AcqRel) {
            return Err(io::Error::other("reply after its ring entry was committed"));
        }
        let (out, args) = data
            .split_first()
            .filter(|(h, _)| h.len() == OUT_HEADER_LEN)
            .ok_or_else(|| io::Error::other("reply without a fuse_out_header"))?;
        let total: usize = args.iter().map(|a| a.len()).sum();
        let header = unsafe { std::slice::from_raw_parts_mut(self.header.as_ptr(), HEADER_LEN) };
        header[..OUT_HEADER_LEN].copy_from_slice(out);
        if total > self.cap {
            // Cannot happen with max_read/max_write within the payload; fail the request
            // rather than the connection.
            header[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            header[PAYLOAD_SZ..PAYLOAD_SZ + 4].copy_from_slice(&0u32.to_ne_bytes());
            return Err(io::Error::other(format!(
                "reply of {total} bytes > {}",
                self.cap
            )));
        }
        let mut at = 0;
        for a in args {
            unsafe {
                std::ptr::copy_nonoverlapping(a.as_ptr(), self.payload.as_ptr().add(at), a.len())
            };
            at += a.len();
        }
        header[PAYLOAD_SZ..PAYLOAD_SZ + 4].copy_from_slice(&(total as u32).to_ne_bytes());
        Ok(())
    }
}

/// A `struct fuse_out_header` without arguments: `{ len, error, unique }`.
fn out_header(unique: u64, error: i32) -> [u8; OUT_HEADER_LEN] {
    let mut h = [0u8; OUT_HEADER_LEN];
    h[0..4].copy_from_slice(&(OUT_HEADER_LEN as u32).to_ne_bytes());
    h[4..8].copy_from_slice(&error.to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h
}

/// The 80-byte command area: `struct fuse_uring_cmd_req { flags, commit_id, qid, pad }`.
fn cmd(qid: u16, commit_id: u64) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

fn register_sqe(fd: i32, qid: u16, e: &Entry, slot: usize) -> squeue::Entry128 {
    let mut sqe = opcode::UringCmd80::new(types::Fd(fd), CMD_REGISTER)
        .cmd(cmd(qid, 0))
        .addr(Some(e.iov.as_ptr() as u64))
        .build()
        .user_data(slot as u64);
    // io-uring 0.7 has no setter for the SQE's `len` (the iovec count): it is the u32 at
    // byte 24 of `struct io_uring_sqe`.
    unsafe {
        (&mut sqe as *mut squeue::Entry128)
            .cast::<u8>()
            .add(24)
            .cast::<u32>()
            .write_unaligned(2)
    };
    sqe
}

fn commit_sqe(fd: i32, qid: u16, commit_id: u64, slot: usize) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(fd), CMD_COMMIT_AND_FETCH)
        .cmd(cmd(qid, commit_id))
        .build()
        .user_data(slot as u64)
}

/// Pins the calling thread to `cpu` (a hint: the queue works from any CPU).
fn pin_to(cpu: usize) {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            debug!("FUSE over io_uring: cannot pin queue {cpu}'s thread to its CPU");
        }
    }
}

/// Serves queue `qid` until the connection ends (Ok) or the kernel refuses the ring (Err).
fn serve_queue(
    fuse: &OwnedFd,
    qid: u16,
    max_payload: usize,
    d: &RawDispatcher<NvmFuse>,
    served: &mut u64,
) -> io::Result<()> {
    pin_to(qid as usize);
    let fd = fuse.as_raw_fd();
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> =
        IoUring::builder().build(DEPTH as u32 * 2)?;
    let mut entries = (0..DEPTH)
        .map(|_| Entry::new(max_payload))
        .collect::<io::Result<Vec<_>>>()?;
    let mut next: Vec<squeue::Entry128> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| register_sqe(fd, qid, e, i))
        .collect();
    let mut scratch = Vec::new();
    let mut done = Vec::with_capacity(DEPTH);
    loop {
        for sqe in next.drain(..) {
            unsafe { ring.submission().push(&sqe) }.expect("the ring has room for every entry");
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        done.extend(
            ring.completion()
                .map(|c| (c.user_data() as usize, c.result())),
        );
        for (slot, res) in done.drain(..) {
            if res < 0 {
                return match -res {
                    // The connection was aborted or unmounted.
                    libc::ENOTCONN | libc::ENODEV | libc::ECANCELED => Ok(()),
                    e => Err(io::Error::from_raw_os_error(e)),
                };
            }
            *served += 1;
            let e = &mut entries[slot];
            e.sink.armed.store(true, Ordering::Release);
            let sink: Arc<dyn RawReplySink> = e.sink.clone();
            let unique = e.unique();
            let parsed = match e.request(&mut scratch) {
                Ok(req) => d.dispatch(req, sink.clone()),
                Err(why) => {
                    warn!("FUSE over io_uring: {why}");
                    false
                }
            };
            if !parsed {
                // Fail the request rather than leave its caller waiting.
                let out = out_header(unique, -libc::EIO);
                let _ = sink.send(&[IoSlice::new(&out)]);
            }
            // Still armed: nothing was replied (a forget), so the entry only goes back to
            // wait for the next request.
            next.push(if e.sink.armed.swap(false, Ordering::AcqRel) {
                register_sqe(fd, qid, e, slot)
            } else {
                commit_sqe(fd, qid, e.commit_id(), slot)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_every_cpu() {
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }

    #[test]
    fn command_area_matches_fuse_uring_cmd_req() {
        let c = cmd(3, 0x1122_3344_5566_7788);
        assert_eq!(&c[0..8], &[0; 8]);
        assert_eq!(
            u64::from_ne_bytes(c[8..16].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
        assert_eq!(u16::from_ne_bytes(c[16..18].try_into().unwrap()), 3);
    }
}
