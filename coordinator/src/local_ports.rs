//! The local ports a host has for connections to one server address.
//!
//! Every TCP connection from this host to one address (IP and port) takes a local port of
//! its own from the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, 32768–60999
//! by default: 28,232 ports). Tens of thousands of streams to one address can need more:
//! the connections past the range fail with "Cannot assign requested address", and the
//! kernel's search for a free port grows slow well before. The coordinator warns before
//! the run, with the fix, instead of letting streams fail one by one.

/// Where Linux keeps the range.
const RANGE_PATH: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// The kernel's ephemeral port range: the local ports connections are given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port of the range.
    pub low: u32,
    /// Last port of the range (included).
    pub high: u32,
}

impl PortRange {
    /// This host's range; `None` where it cannot be read (not Linux, no /proc).
    pub fn of_host() -> Option<PortRange> {
        PortRange::parse(&std::fs::read_to_string(RANGE_PATH).ok()?)
    }

    /// The file's text: two numbers separated by white space.
    fn parse(text: &str) -> Option<PortRange> {
        let mut numbers = text.split_whitespace().map(str::parse::<u32>);
        let (Some(Ok(low)), Some(Ok(high)), None) =
            (numbers.next(), numbers.next(), numbers.next())
        else {
            return None;
        };
        (low <= high).then_some(PortRange { low, high })
    }

    /// How many ports the range holds.
    pub fn ports(self) -> u64 {
        u64::from(self.high - self.low) + 1
    }
}

/// The warning for `connections` open at once to one server address when the range
/// holds fewer ports (`None` when they fit). `what` names the flag that asked for them.
pub fn port_warning(connections: u64, range: PortRange, what: &str) -> Option<String> {
    if connections <= range.ports() {
        return None;
    }
    Some(format!(
        "{what}: up to {connections} connections at once to one server address need as many local ports, but this host's ephemeral range (net.ipv4.ip_local_port_range {} {}) holds {}: connections past it fail with \"Cannot assign requested address\"; widen it (sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\" as root) or spread the streams over more client hosts (--shard)",
        range.low,
        range.high,
        range.ports()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_file_is_read_as_the_kernel_writes_it() {
        assert_eq!(
            PortRange::parse("32768\t60999\n"),
            Some(PortRange {
                low: 32768,
                high: 60999
            })
        );
        assert_eq!(
            PortRange::parse("32768\t60999\n").map(PortRange::ports),
            Some(28232)
        );
        for bad in ["", "32768", "60999 32768", "a b", "1 2 3"] {
            assert_eq!(PortRange::parse(bad), None, "{bad:?}");
        }
        // Where the host has the file, its range parses.
        if std::path::Path::new(RANGE_PATH).exists() {
            assert!(PortRange::of_host().is_some_and(|r| r.ports() > 0));
        }
    }

    #[test]
    fn connections_past_the_range_are_warned_with_the_numbers_and_the_fix() {
        let range = PortRange {
            low: 32768,
            high: 60999,
        };
        assert_eq!(port_warning(28232, range, "--rate 28232"), None);
        let warning =
            port_warning(50000, range, "--rate 50000 (concurrent@50000)").expect("over the range");
        for part in [
            "--rate 50000 (concurrent@50000)",
            "up to 50000 connections at once",
            "32768 60999",
            "holds 28232",
            "Cannot assign requested address",
            "ip_local_port_range=\"1024 65535\"",
            "--shard",
        ] {
            assert!(warning.contains(part), "{part:?} in {warning}");
        }
        assert!(!warning.contains('\n'));
    }
}
