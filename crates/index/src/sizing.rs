//! How big the table is, derived from the memory budget.

use crate::bucket::SLOTS;
use crate::IndexError;

/// Load factor the table is sized for when memory is full of items of the expected size. A
/// 2-choice, 8-slot cuckoo table reaches ~95% before inserts start failing; 0.85 leaves room
/// for the size guess to be off without constant displacement.
pub const TARGET_LOAD: f64 = 0.85;
/// The most a table may be loaded if the power-of-two rounding goes down instead of up.
pub const MAX_ROUNDED_LOAD: f64 = 0.95;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexSizing {
    pub partitions: u32,
    /// Power of two.
    pub buckets_per_partition: u32,
}

impl IndexSizing {
    /// Sizes the index for a budget that will hold items of about `expected_item_bytes` each
    /// (the slab chunk they land in, header included). The index itself comes out of the same
    /// budget, so the item count is what fits beside it.
    pub fn for_budget(
        budget_bytes: usize,
        expected_item_bytes: usize,
        partitions: u32,
    ) -> Result<IndexSizing, IndexError> {
        if partitions == 0 {
            return Err(IndexError::Size("at least one partition".into()));
        }
        let per_item_index = 64.0 / (SLOTS as f64 * TARGET_LOAD);
        let items = budget_bytes as f64 / (expected_item_bytes.max(1) as f64 + per_item_index);
        let wanted = (items / partitions as f64 / (SLOTS as f64 * TARGET_LOAD)).max(2.0);
        let up = (wanted.ceil() as u64).next_power_of_two();
        let down = (up / 2).max(2);
        let down_load = wanted * TARGET_LOAD / down as f64;
        let buckets = if down_load <= MAX_ROUNDED_LOAD {
            down
        } else {
            up
        };
        let buckets = u32::try_from(buckets)
            .ok()
            .filter(|&b| b <= 1 << 27)
            .ok_or_else(|| IndexError::Size(format!("{buckets} buckets per partition")))?;
        Ok(IndexSizing {
            partitions,
            buckets_per_partition: buckets,
        })
    }

    pub fn with_buckets(partitions: u32, buckets_per_partition: u32) -> Result<Self, IndexError> {
        if partitions == 0 || !buckets_per_partition.is_power_of_two() {
            return Err(IndexError::Size(format!(
                "{partitions} partitions of {buckets_per_partition} buckets (need >0 and a power of two)"
            )));
        }
        Ok(IndexSizing {
            partitions,
            buckets_per_partition,
        })
    }

    pub fn bytes_per_partition(&self) -> usize {
        self.buckets_per_partition as usize * 64
    }

    pub fn total_bytes(&self) -> usize {
        self.bytes_per_partition() * self.partitions as usize
    }

    pub fn slots(&self) -> u64 {
        self.buckets_per_partition as u64 * SLOTS as u64 * self.partitions as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_from_budget_as_a_power_of_two() {
        // 64 MiB of ~100-byte items: about 600k items, about 90k buckets -> 2^17 (load 0.69)
        // or 2^16 (load > 0.95, rejected).
        let s = IndexSizing::for_budget(64 << 20, 100, 1).unwrap();
        assert_eq!(s.buckets_per_partition, 1 << 17);
        assert!(s.total_bytes() < (64 << 20) / 4);
        let two = IndexSizing::for_budget(64 << 20, 100, 2).unwrap();
        assert_eq!(two.buckets_per_partition, 1 << 16);
        let tiny = IndexSizing::for_budget(1000, 100, 4).unwrap();
        assert_eq!(tiny.buckets_per_partition, 2);
        assert!(IndexSizing::with_buckets(1, 3).is_err());
    }
}
