//! Flag values in memcached's spellings: sizes (`-I 2m`), listen addresses (`-l notls:IP`),
//! octal masks (`-a 0700`) and batch intervals (`--batch-interval-us MIN..MAX`).

use std::net::IpAddr;

/// `"MIN..MAX"` or `"C"` in microseconds.
pub fn parse_interval(s: &str) -> Result<(f64, f64), String> {
    let num = |t: &str| -> Result<f64, String> {
        let v: f64 = t
            .trim()
            .parse()
            .map_err(|_| format!("batch interval {s:?}: {t:?} is not a number of microseconds"))?;
        if !(0.0..=1_000_000.0).contains(&v) {
            return Err(format!(
                "batch interval {s:?}: must be 0..1000000 microseconds"
            ));
        }
        Ok(v)
    };
    let (lo, hi) = match s.split_once("..") {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let v = num(s)?;
            (v, v)
        }
    };
    if lo > hi {
        return Err(format!("batch interval {s:?}: MIN is above MAX"));
    }
    Ok((lo, hi))
}

/// One `-l` entry: an address, `notls:` in front for a plain listener with -Z on.
#[derive(Clone, Debug)]
pub struct ListenAddr {
    pub ip: IpAddr,
    pub notls: bool,
}

pub fn parse_listen(s: &str) -> Result<ListenAddr, String> {
    let (notls, addr) = match s.strip_prefix("notls:") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    // memcached also takes `[::1]`.
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    let ip = addr
        .parse()
        .map_err(|_| format!("bad listen address {s:?}: use an IP address"))?;
    Ok(ListenAddr { ip, notls })
}

pub fn parse_octal(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("bad mask {s:?}: use octal permissions such as 0700"))
}

pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad size {s:?}: use a number with an optional k, m or g"))
}
