//! The hook through which a tracer sees every persistent store, flush and fence.

/// Receives the persistence events of a region. Implementations must be cheap and must not
/// call back into the region.
pub trait PersistTrace: Send + Sync {
    /// A cached store of `data` at `off`: durable only after a flush of its lines and a fence.
    fn store(&self, off: u64, data: &[u8]);
    /// A non-temporal store: durable after the next fence.
    fn store_nt(&self, off: u64, data: &[u8]);
    /// Write-back of the cache line starting at `line_off`.
    fn flush(&self, line_off: u64);
    /// A store fence.
    fn fence(&self);
    /// A file-system operation starts.
    fn op_begin(&self, _name: &'static str) {}
    /// The operation started last has returned.
    fn op_end(&self) {}
}
