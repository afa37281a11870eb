//! KV-Direct's load dispatch (§3.3.4: a share of the requests to on-board DRAM, the rest to
//! host memory, the ratio set so both are busy) applied to processors: a device-placed
//! search that cannot be shared by work stealing (a GPU, whose memory and atomics are not
//! the host's, or `HKV_OPENCL_STEAL=0`) is split instead. The device gets a share of the
//! batch and the partition's thread searches the rest meanwhile; the share follows the
//! measured rates of both, so that they finish together.

use hkv_index::opencl::Split;

/// The device always gets at least this many queries of a split batch (a work-group), so
/// its rate stays measured even when the thread is the faster.
const MIN_DEVICE_SHARE: usize = 64;
/// The thread waited for the device only if it waited longer than this share of its own
/// part (1/20: shorter waits are timer noise).
const WAIT_SHARE: u64 = 20;
/// Weight of the newest batch's ideal share.
const GAIN: f64 = 0.3;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Dispatch {
    /// The device's share of a split batch, 0..=1.
    ratio: f64,
    pub splits: u64,
    pub device_queries: u64,
    pub queries: u64,
}

impl Default for Dispatch {
    fn default() -> Self {
        Dispatch {
            ratio: 0.5,
            splits: 0,
            device_queries: 0,
            queries: 0,
        }
    }
}

impl Dispatch {
    /// The device's share now.
    #[cfg(test)]
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// How many of `n` queries the device gets.
    pub fn device_share(&self, n: usize) -> usize {
        ((n as f64 * self.ratio).round() as usize).clamp(MIN_DEVICE_SHARE.min(n), n)
    }

    /// A split of `n` queries, `k` of them on the device, took `split`: moves the share
    /// toward the one at which both sides would have finished together.
    pub fn observe(&mut self, k: usize, n: usize, split: Split) {
        self.splits += 1;
        self.device_queries += k as u64;
        self.queries += n as u64;
        let host = (n - k) as f64;
        let (th, tw) = (split.host_ns.max(1) as f64, split.wait_ns as f64);
        let ideal = if host == 0.0 {
            // The thread had nothing to measure itself on: hand it some again.
            self.ratio * 0.9
        } else if split.wait_ns * WAIT_SHARE > split.host_ns {
            // The device finished last: both rates are known.
            let device_rate = k as f64 / (th + tw);
            let host_rate = host / th;
            device_rate / (device_rate + host_rate)
        } else {
            // The device was done first: it is at least this fast; try it with more.
            (self.ratio * 1.05).min(1.0)
        };
        self.ratio = ((1.0 - GAIN) * self.ratio + GAIN * ideal).clamp(0.0, 1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates a device `d` times as fast per query as the thread, with a fixed launch.
    fn run(d: f64, batches: usize) -> Dispatch {
        let mut x = Dispatch::default();
        let n = 1024;
        for _ in 0..batches {
            let k = x.device_share(n);
            let host_ns = ((n - k) as f64 * 10.0) as u64;
            let device_ns = (5_000.0 + k as f64 * 10.0 / d) as u64;
            x.observe(
                k,
                n,
                Split {
                    host_ns,
                    wait_ns: device_ns.saturating_sub(host_ns),
                },
            );
        }
        x
    }

    #[test]
    fn the_share_settles_where_both_finish_together() {
        // Devices 3x and 50x the thread per query, after a launch of half the thread's
        // whole batch: both sides finish within a tenth of that batch's time.
        for d in [3.0, 50.0] {
            let x = run(d, 200);
            let k = x.device_share(1024) as f64;
            let host = (1024.0 - k) * 10.0;
            let device = 5_000.0 + k * 10.0 / d;
            assert!(
                (host - device).abs() < 1_024.0,
                "{d}x: host {host} ns, device {device} ns"
            );
        }
        // A slow device gets little, but never nothing.
        let slow = run(0.1, 200);
        assert_eq!(slow.device_share(1024), MIN_DEVICE_SHARE);
    }

    #[test]
    fn it_follows_a_device_that_slows_down() {
        let mut x = run(3.0, 200);
        let before = x.ratio();
        for _ in 0..100 {
            let k = x.device_share(1024);
            x.observe(
                k,
                1024,
                Split {
                    host_ns: ((1024 - k) * 10) as u64,
                    wait_ns: 1_000_000,
                },
            );
        }
        assert!(x.ratio() < before / 4.0, "{} -> {}", before, x.ratio());
        assert_eq!(x.splits, 300);
    }
}
