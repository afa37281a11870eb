//! What a batch's index work cost, for the scheduler's fit (Mega-KV §5).

/// Operations in one batch and the time spent on them (searches: IN; writes: MM + IN).
/// Searches are timed in sampled batches only (`sampled`): `search_ns` is the time of
/// `timed_reads`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchTiming {
    pub sampled: bool,
    pub reads: u64,
    pub timed_reads: u64,
    pub search_ns: u64,
    pub writes: u64,
    pub write_ns: u64,
}

impl BatchTiming {
    pub fn add(&mut self, o: &BatchTiming) {
        self.sampled |= o.sampled;
        self.reads += o.reads;
        self.timed_reads += o.timed_reads;
        self.search_ns += o.search_ns;
        self.writes += o.writes;
        self.write_ns += o.write_ns;
    }
}
