//! The mount-state block (block 2): whether the image was unmounted cleanly. Written at mount
//! and unmount only; a mount that finds it "mounted" runs full recovery.

use super::{get_u32, get_u64, put_u32, put_u64};

pub const STATE_CLEAN: u64 = 0;
pub const STATE_MOUNTED: u64 = 1;

const O_STATE: usize = 0;
const O_MOUNT_COUNT: usize = 8;
const O_LAST_MOUNT_NS: usize = 16;
const O_LAST_UNMOUNT_NS: usize = 24;
const O_CHECKSUM: usize = 32;
pub const STATE_LEN: usize = 36;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountState {
    pub state: u64,
    pub mount_count: u64,
    pub last_mount_ns: u64,
    pub last_unmount_ns: u64,
}

impl MountState {
    pub fn encode(&self) -> [u8; STATE_LEN] {
        let mut b = [0u8; STATE_LEN];
        put_u64(&mut b, O_STATE, self.state);
        put_u64(&mut b, O_MOUNT_COUNT, self.mount_count);
        put_u64(&mut b, O_LAST_MOUNT_NS, self.last_mount_ns);
        put_u64(&mut b, O_LAST_UNMOUNT_NS, self.last_unmount_ns);
        let crc = crc32c::crc32c(&b[..O_CHECKSUM]);
        put_u32(&mut b, O_CHECKSUM, crc);
        b
    }

    /// Decodes the block; `None` when the checksum or state is bad (treated as unclean).
    pub fn decode(b: &[u8]) -> Option<MountState> {
        if get_u32(b, O_CHECKSUM) != crc32c::crc32c(&b[..O_CHECKSUM]) {
            return None;
        }
        let s = MountState {
            state: get_u64(b, O_STATE),
            mount_count: get_u64(b, O_MOUNT_COUNT),
            last_mount_ns: get_u64(b, O_LAST_MOUNT_NS),
            last_unmount_ns: get_u64(b, O_LAST_UNMOUNT_NS),
        };
        (s.state == STATE_CLEAN || s.state == STATE_MOUNTED).then_some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_damage() {
        let s = MountState {
            state: STATE_MOUNTED,
            mount_count: 3,
            last_mount_ns: 9,
            last_unmount_ns: 8,
        };
        let mut b = s.encode();
        assert_eq!(MountState::decode(&b), Some(s));
        b[9] ^= 1;
        assert_eq!(MountState::decode(&b), None);
    }
}
