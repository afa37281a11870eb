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

/// One `-l` entry, as memcached reads it: a host name or address (`[::1]` bracketed or
/// not), `:PORT` after it to listen there instead of `-p`'s port, `notls:` in front for a
/// plain listener with -Z on. A name is resolved at start and every address it has is
/// listened on, as memcached's `getaddrinfo` loop does (`localhost`: 127.0.0.1 and ::1).
#[derive(Clone, Debug)]
pub struct ListenAddr {
    pub ips: Vec<IpAddr>,
    pub port: Option<u16>,
    pub notls: bool,
}

pub fn parse_listen(s: &str) -> Result<ListenAddr, String> {
    let (notls, entry) = match s.strip_prefix("notls:") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    // memcached's rule: a port follows `]` or the only colon; more colons are an IPv6
    // address without a port.
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("bad listen address {s:?}: no closing ]"))?;
        (host, after.strip_prefix(':'))
    } else {
        match entry.split_once(':') {
            Some((host, port)) if !port.contains(':') => (host, Some(port)),
            _ => (entry, None),
        }
    };
    let port = port
        .map(|p| {
            p.parse::<u16>()
                .map_err(|_| format!("Invalid port number: \"{p}\""))
        })
        .transpose()?;
    let ips = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) if host.is_empty() => return Err(format!("bad listen address {s:?}")),
        Err(_) => {
            let mut ips: Vec<IpAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(host, 0))
                .map_err(|e| format!("bad listen address {s:?}: {e}"))?
                .map(|a| a.ip())
                .collect();
            let mut seen = Vec::new();
            ips.retain(|ip| {
                !seen.contains(ip) && {
                    seen.push(*ip);
                    true
                }
            });
            ips
        }
    };
    Ok(ListenAddr { ips, port, notls })
}

/// `-a`'s mask: octal digits, as memcached's `strtol(.., 8)` reads them. Rust's `0o` prefix
/// is refused: memcached reads `0o777` as 0, so a mask that means 0777 here would mean
/// no access there.
pub fn parse_octal(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
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

#[cfg(test)]
mod tests {
    #[test]
    fn regression_a_unix_mask_is_octal_digits_only() {
        use super::parse_octal;
        assert_eq!(parse_octal("0700"), Ok(0o700));
        assert_eq!(parse_octal("750"), Ok(0o750));
        for bad in ["0o777", "0x1ff", "8", "1000", "", "-1"] {
            assert!(parse_octal(bad).is_err(), "{bad:?}");
        }
    }

    use super::*;

    fn ips(s: &str) -> (Vec<String>, Option<u16>, bool) {
        let l = parse_listen(s).unwrap();
        (
            l.ips.iter().map(|ip| ip.to_string()).collect(),
            l.port,
            l.notls,
        )
    }

    /// memcached takes host names and `ADDR:PORT`; hkv refused both ("use an IP address"),
    /// so `-l localhost` from a memcached config did not start.
    #[test]
    fn regression_listen_entries_take_names_and_ports_as_memcached_does() {
        assert_eq!(ips("127.0.0.1"), (vec!["127.0.0.1".into()], None, false));
        assert_eq!(
            ips("127.0.0.1:22145"),
            (vec!["127.0.0.1".into()], Some(22145), false)
        );
        assert_eq!(ips("[::1]:22155"), (vec!["::1".into()], Some(22155), false));
        assert_eq!(ips("[::1]"), (vec!["::1".into()], None, false));
        assert_eq!(ips("::1"), (vec!["::1".into()], None, false));
        assert_eq!(
            ips("notls:10.0.0.1:7"),
            (vec!["10.0.0.1".into()], Some(7), true)
        );
        let (local, port, _) = ips("localhost:22151");
        assert!(local.contains(&"127.0.0.1".to_string()), "{local:?}");
        assert_eq!(port, Some(22151));
        assert_eq!(
            parse_listen("127.0.0.1:x").unwrap_err(),
            "Invalid port number: \"x\""
        );
        assert!(parse_listen("no-such-host.invalid").is_err());
        assert!(parse_listen("[::1").is_err());
    }
}
