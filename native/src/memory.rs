//! Memory limits: a model whose weights, or whose session, would need more memory than
//! the machine has (or than `--max-memory`) is refused before the memory is taken, with
//! the sizes, instead of swapping the machine to a halt or being killed midway.

use std::fmt;

/// The most memory a model and its session may use, and where that figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    /// Bytes.
    pub bytes: u64,
    /// Whether the user set it (`--max-memory`) or it is the machine's memory.
    pub from_user: bool,
}

impl MemoryLimit {
    /// `max_memory` when given, else the machine's physical memory (Linux: `MemTotal` of
    /// /proc/meminfo), else no limit.
    pub fn new(max_memory: Option<u64>) -> Option<MemoryLimit> {
        match max_memory {
            Some(bytes) => Some(MemoryLimit { bytes, from_user: true }),
            None => machine_memory().map(|bytes| MemoryLimit { bytes, from_user: false }),
        }
    }
}

impl fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = if self.from_user { "the --max-memory limit of" } else { "this machine's" };
        write!(f, "{whose} {}", human(self.bytes))
    }
}

/// Physical memory of this machine, where the OS says.
pub fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = info.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

/// A size as users write it: `123456` bytes, or with a binary suffix `K`, `M`, `G`, `T`
/// (`KiB`, `MiB`, ... and `KB`, ... read the same), fractions allowed (`1.5G`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{s:?}: expected a size such as 800M, 2G or 1.5GiB")),
    };
    let value: f64 = number.parse().map_err(|_| format!("{s:?}: expected a size such as 800M, 2G or 1.5GiB"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("{s:?}: a size of at least one byte"));
    }
    Ok(bytes as u64)
}

/// Bytes in MiB or GiB, for messages.
pub fn human(bytes: u64) -> String {
    let mib = bytes as f64 / (1u64 << 20) as f64;
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_users_write_them() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("800M"), Ok(800 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size(" 64 kb "), Ok(64 << 10));
        for bad in ["", "G", "-1G", "0", "2X", "1e9", "nan"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn this_machine_reports_its_memory() {
        if cfg!(target_os = "linux") {
            let bytes = machine_memory().expect("/proc/meminfo");
            assert!(bytes > 64 << 20, "{bytes}");
        }
    }
}
