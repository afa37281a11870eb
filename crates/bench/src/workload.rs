//! The papers' workloads, shared by the engine and network modes.

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Dataset {
    K8,
    K16,
    K32,
    K128,
}

impl Dataset {
    /// (key bytes, value bytes, default key count): the papers' data sets.
    pub(crate) fn shape(self) -> (usize, usize, u64) {
        match self {
            Dataset::K8 => (8, 8, 10_000_000),
            Dataset::K16 => (16, 64, 10_000_000),
            Dataset::K32 => (32, 256, 4_000_000),
            Dataset::K128 => (128, 1024, 1_000_000),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Workload {
    /// 50% GET, 50% SET.
    A,
    /// 95% GET.
    B,
    /// 100% GET.
    C,
}

impl Workload {
    pub(crate) fn get_percent(self) -> u64 {
        match self {
            Workload::A => 50,
            Workload::B => 95,
            Workload::C => 100,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Dist {
    Uniform,
    Zipf,
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn write_key(id: u64, out: &mut [u8]) {
    // Zero-padded decimal, as wide as the data set's key.
    let mut x = id;
    for b in out.iter_mut().rev() {
        *b = b'0' + (x % 10) as u8;
        x /= 10;
    }
}
