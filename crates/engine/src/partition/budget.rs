//! The value bytes a batch may copy for reads that could wait for a later batch.

/// How many value bytes a batch may copy for deferrable reads, in all and per client.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ValueBudget {
    pub total: usize,
    pub group: usize,
    /// `Responses::pin_from`.
    pub pin_from: usize,
    /// `Responses::pin_past_budget`.
    pub pin_past_budget: usize,
}

impl Default for ValueBudget {
    fn default() -> Self {
        ValueBudget {
            total: usize::MAX,
            group: usize::MAX,
            pin_from: usize::MAX,
            pin_past_budget: usize::MAX,
        }
    }
}

impl ValueBudget {
    /// The limits the network set on this batch's responses.
    pub(crate) fn of(out: &hkv_types::Responses) -> Self {
        ValueBudget {
            total: out.value_budget,
            group: out.group_budget,
            pin_from: out.pin_from,
            pin_past_budget: out.pin_past_budget,
        }
    }

    /// Whether a value of `len` bytes must wait: it would pass a budget that already holds
    /// something (the first value of the batch and of each client always goes, so every
    /// batch and client makes progress).
    pub(super) fn defers(&self, batch_bytes: usize, group_bytes: usize, len: usize) -> bool {
        (batch_bytes > 0 && batch_bytes.saturating_add(len) > self.total)
            || (group_bytes > 0 && group_bytes.saturating_add(len) > self.group)
    }
}
