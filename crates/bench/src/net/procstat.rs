//! A server process's CPU time, from /proc/PID/stat: user + system of all its threads.
//!
//! The load generator shares the machine with the server, so throughput alone may measure the
//! client; CPU seconds per operation measure the server whoever is the bottleneck.

/// CPU seconds the process has used so far, or None if /proc cannot tell.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&s, USER_HZ)
}

/// /proc reports times in USER_HZ ticks, which Linux fixes at 100 on every architecture's ABI.
const USER_HZ: f64 = 100.0;

/// utime + stime (fields 14 and 15) in seconds. The command name, field 2, is in parentheses
/// and may itself hold spaces and parentheses, so fields are counted from the last ')'.
fn parse_stat(s: &str, hz: f64) -> Option<f64> {
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_name_with_spaces() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(parse_stat(line, 100.0), Some(3.0));
    }

    #[test]
    fn this_process_uses_cpu() {
        let before = cpu_seconds(std::process::id()).expect("/proc is there on Linux");
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 100 {
            x = x.wrapping_mul(31).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = cpu_seconds(std::process::id()).unwrap();
        assert!(after > before, "{before} -> {after}");
    }
}
