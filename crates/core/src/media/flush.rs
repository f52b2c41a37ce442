//! Cache-line write-back and store fences, chosen once at run time by CPU feature.
//!
//! This file and `media/mod.rs` are the only places that issue flushes or fences: every other
//! module persists through `Pm::persist` and `Pm::fence`, so the crash tests can trace them.

/// Size of a CPU cache line; the unit of persistence on x86.
pub const CACHE_LINE: u64 = 64;

/// Which write-back instruction this CPU offers, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushKind {
    /// `clwb`: writes the line back and may keep it cached.
    Clwb,
    /// `clflushopt`: writes back and evicts, weakly ordered.
    ClflushOpt,
    /// `clflush`: writes back and evicts, serialising.
    Clflush,
    /// No write-back instruction (non-x86): stores are left to the memory system.
    None,
    /// Write-backs skipped on request (`NVMFS_NO_FLUSH=1`): the CPU caches are taken to be
    /// inside the persistence domain (eADR), so a store is durable once it is globally
    /// visible. Fences stay: they still order stores and drain non-temporal ones.
    Skipped,
}

/// The environment variable that turns cache-line write-backs off (`1`), as PMDK's
/// `PMEM_NO_FLUSH` does for libpmem.
pub const NO_FLUSH_ENV: &str = "NVMFS_NO_FLUSH";

impl FlushKind {
    /// Detects the best instruction available on this CPU.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID leaf 7, sub-leaf 0, EBX: bit 23 clflushopt, bit 24 clwb.
            let ebx = std::arch::x86_64::__cpuid_count(7, 0).ebx;
            if ebx & (1 << 24) != 0 {
                return FlushKind::Clwb;
            }
            if ebx & (1 << 23) != 0 {
                return FlushKind::ClflushOpt;
            }
            FlushKind::Clflush
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            FlushKind::None
        }
    }

    /// What this process uses: [`Skipped`](Self::Skipped) when `NVMFS_NO_FLUSH` is `1`,
    /// else [`detect`](Self::detect). Any other value keeps the write-backs (the safe side);
    /// the command line refuses it (`no_flush_requested`).
    pub fn selected() -> Self {
        match no_flush_requested() {
            Ok(true) => FlushKind::Skipped,
            _ => Self::detect(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::None => "none",
            FlushKind::Skipped => "none (NVMFS_NO_FLUSH=1: caches taken as persistent)",
        }
    }

    /// Writes back the cache line holding `p`.
    ///
    /// # Safety
    /// `p` must point into mapped memory.
    #[inline]
    pub unsafe fn flush_line(self, p: *const u8) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the instructions only write back a line of mapped memory; they were detected
        // on this CPU by `detect`.
        unsafe {
            match self {
                FlushKind::Clwb => {
                    std::arch::asm!("clwb [{}]", in(reg) p, options(nostack, preserves_flags))
                }
                FlushKind::ClflushOpt => {
                    std::arch::asm!("clflushopt [{}]", in(reg) p, options(nostack, preserves_flags))
                }
                FlushKind::Clflush => {
                    std::arch::asm!("clflush [{}]", in(reg) p, options(nostack, preserves_flags))
                }
                FlushKind::None | FlushKind::Skipped => {}
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }
}

/// Whether `NVMFS_NO_FLUSH` asks for no write-backs: unset, empty or `0` no, `1` yes, and
/// anything else an error naming the variable.
pub fn no_flush_requested() -> Result<bool, String> {
    let Some(v) = std::env::var_os(NO_FLUSH_ENV) else {
        return Ok(false);
    };
    match v.to_str() {
        Some("" | "0") => Ok(false),
        Some("1") => Ok(true),
        _ => Err(format!(
            "{NO_FLUSH_ENV}={v:?}: use 1 (skip cache-line write-backs) or 0"
        )),
    }
}

/// Orders all earlier stores, flushes and non-temporal stores before any later store.
#[inline]
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no operands and no memory effects beyond ordering.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Copies `len` bytes with non-temporal stores: the data bypasses the cache and is durable
/// after the next `store_fence`, so no flush is needed. `dst` must be 16-byte aligned and
/// `len` a multiple of 16.
///
/// # Safety
/// `src` and `dst` must be valid for `len` bytes and must not overlap.
#[inline]
pub unsafe fn copy_nontemporal(dst: *mut u8, src: *const u8, len: usize) {
    debug_assert_eq!(dst as usize % 16, 0);
    debug_assert_eq!(len % 16, 0);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sse2 is part of x86_64; bounds and alignment are the caller's contract.
    unsafe {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let mut i = 0;
        while i < len {
            let v = _mm_loadu_si128(src.add(i) as *const __m128i);
            _mm_stream_si128(dst.add(i) as *mut __m128i, v);
            i += 16;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

/// Fills `len` bytes with zeroes using non-temporal stores (same contract as the copy).
///
/// # Safety
/// `dst` must be valid for `len` bytes.
#[inline]
pub unsafe fn zero_nontemporal(dst: *mut u8, len: usize) {
    debug_assert_eq!(dst as usize % 16, 0);
    debug_assert_eq!(len % 16, 0);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as above.
    unsafe {
        use std::arch::x86_64::{__m128i, _mm_setzero_si128, _mm_stream_si128};
        let z = _mm_setzero_si128();
        let mut i = 0;
        while i < len {
            _mm_stream_si128(dst.add(i) as *mut __m128i, z);
            i += 16;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unsafe {
        std::ptr::write_bytes(dst, 0, len)
    };
}
