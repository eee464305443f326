//! Reading CPU time from procfs: the parser of `/proc/<pid>/stat` (and of the per-thread
//! `/proc/self/task/<tid>/stat`), of the machine-wide `cpu` line of `/proc/stat` and of
//! `/proc/loadavg` (the machine is shared: what else ran counts), and the kernel's clock tick
//! rate that these count in, taken from the `AT_CLKTCK` entry of `/proc/self/auxv` (what
//! `sysconf(_SC_CLK_TCK)` returns, without `unsafe` or a C library binding), falling back to
//! `getconf CLK_TCK` and then to the usual 100.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// `AT_CLKTCK` in the ELF auxiliary vector (linux/auxvec.h).
const AT_CLKTCK: u64 = 17;
/// `AT_NULL`: the end of the auxiliary vector.
const AT_NULL: u64 = 0;
/// What Linux uses on every common architecture when nothing else can be read.
const DEFAULT_CLOCK_TICKS: u64 = 100;

/// The figures of one `stat` line this tool uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 2 without its parentheses: the executable or thread name (≤ 15 bytes; may hold
    /// spaces and parentheses).
    pub comm: String,
    /// Field 14: CPU time in user mode, clock ticks.
    pub utime: u64,
    /// Field 15: CPU time in kernel mode, clock ticks.
    pub stime: u64,
}

impl ProcStat {
    /// User plus system time, clock ticks.
    pub fn ticks(&self) -> u64 {
        self.utime.saturating_add(self.stime)
    }
}

/// Parses one `stat` line: `pid (comm) state ppid ... utime stime ...`. The fields after the
/// comm are split after the *last* `)`, since the comm itself may contain `)` and spaces.
pub fn parse(line: &str) -> Option<ProcStat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    if close < open {
        return None;
    }
    let comm = line.get(open + 1..close)?.to_owned();
    // the rest starts with field 3 (state): field n is at index n - 3
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(ProcStat {
        comm,
        utime: field(14)?,
        stime: field(15)?,
    })
}

/// Reads and parses a `stat` file; `None` when the process is gone or the file is odd.
pub fn read(path: &Path) -> Option<ProcStat> {
    parse(&std::fs::read_to_string(path).ok()?)
}

/// `/proc/<pid>/stat` of a process (the whole process: every thread, live or exited).
pub fn read_pid(pid: u32) -> Option<ProcStat> {
    read(Path::new(&format!("/proc/{pid}/stat")))
}

/// The `stat` of every live thread of this process.
pub fn own_threads() -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    entries
        .map_while(Result::ok)
        .filter_map(|entry| read(&entry.path().join("stat")))
        .collect()
}

/// The machine-wide CPU time of `/proc/stat`, clock ticks summed over every CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineTicks {
    /// Time not idle (user, nice, system, irq, softirq, steal).
    pub busy: u64,
    /// All time (busy plus idle and iowait).
    pub total: u64,
}

/// Parses the first (`cpu `) line of `/proc/stat`: `cpu user nice system idle iowait irq
/// softirq steal guest guest_nice` (guest time is already part of user time, so it is left out).
pub fn parse_machine(stat: &str) -> Option<MachineTicks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if fields.len() < 4 {
        return None;
    }
    let total: u64 = fields.iter().sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Some(MachineTicks {
        busy: total.saturating_sub(idle),
        total,
    })
}

/// The machine's CPU time now.
pub fn read_machine() -> Option<MachineTicks> {
    parse_machine(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The 1-minute load average of `/proc/loadavg`.
pub fn parse_load_average(loadavg: &str) -> Option<f64> {
    loadavg.split_whitespace().next()?.parse().ok()
}

/// The machine's 1-minute load average now.
pub fn load_average() -> Option<f64> {
    parse_load_average(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// Clock ticks per second (`USER_HZ`), read once.
pub fn clock_ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::fs::read("/proc/self/auxv")
            .ok()
            .and_then(|auxv| auxv_value(&auxv, AT_CLKTCK))
            .or_else(getconf_clk_tck)
            .filter(|ticks| *ticks > 0)
            .unwrap_or(DEFAULT_CLOCK_TICKS)
    })
}

/// The value of entry `key` in an auxiliary vector: native-endian (key, value) pairs of
/// machine words, ended by `AT_NULL`.
pub fn auxv_value(auxv: &[u8], key: u64) -> Option<u64> {
    let word = std::mem::size_of::<usize>();
    let read_word = |bytes: &[u8]| -> Option<u64> {
        match word {
            8 => Some(u64::from_ne_bytes(bytes.try_into().ok()?)),
            4 => Some(u64::from(u32::from_ne_bytes(bytes.try_into().ok()?))),
            _ => None,
        }
    };
    for pair in auxv.chunks_exact(2 * word) {
        let (k, v) = pair.split_at(word);
        let k = read_word(k)?;
        if k == AT_NULL {
            return None;
        }
        if k == key {
            return read_word(v);
        }
    }
    None
}

fn getconf_clk_tck() -> Option<u64> {
    let output = Command::new("getconf")
        .arg("CLK_TCK")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout).trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real line of `/proc/<pid>/stat` (mosquitto), utime 1234 and stime 567.
    const PLAIN: &str = "4242 (mosquitto) S 1 4242 4242 0 -1 4194560 1500 0 0 0 1234 567 0 0 20 0 1 0 \
                         123456 12345678 1000 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn parses_utime_and_stime() {
        let stat = parse(PLAIN).expect("valid line");
        assert_eq!(stat.comm, "mosquitto");
        assert_eq!((stat.utime, stat.stime), (1234, 567));
        assert_eq!(stat.ticks(), 1801);
    }

    #[test]
    fn comm_with_spaces_and_parentheses() {
        let line = PLAIN.replace("(mosquitto)", "(a) b (c) d)");
        let stat = parse(&line).expect("valid line");
        assert_eq!(stat.comm, "a) b (c) d");
        assert_eq!((stat.utime, stat.stime), (1234, 567));
        let empty = PLAIN.replace("(mosquitto)", "()");
        assert_eq!(parse(&empty).map(|s| s.ticks()), Some(1801));
    }

    #[test]
    fn malformed_lines_are_rejected() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("12 mosquitto S 1 2 3"), None, "no parentheses");
        assert_eq!(parse("12 )x( S 1 2 3 4 5 6 7 8 9 10 11 12 13"), None);
        assert_eq!(
            parse("12 (short) S 1 2 3 4 5 6 7 8 9"),
            None,
            "too few fields"
        );
        let bad = PLAIN.replace(" 1234 567 ", " 1234 x ");
        assert_eq!(parse(&bad), None, "stime not a number");
    }

    #[test]
    fn own_process_and_threads_are_readable() {
        let own = read_pid(std::process::id()).expect("own stat");
        assert!(!own.comm.is_empty());
        let threads = own_threads();
        assert!(!threads.is_empty());
        assert!(read_pid(u32::MAX).is_none());
    }

    #[test]
    fn machine_cpu_line() {
        let stat = "cpu  278796 0 32821 158857 1843 0 1929 1740 500 0\n\
                    cpu0 139398 0 16410 79428 921 0 964 870 250 0\nintr 1 2 3\n";
        let m = parse_machine(stat).expect("cpu line");
        // user+nice+system+irq+softirq+steal; guest (500) not added again
        assert_eq!(m.busy, 278_796 + 32_821 + 1_929 + 1_740);
        assert_eq!(m.total, m.busy + 158_857 + 1_843);
        assert_eq!(
            parse_machine("cpu0 1 2 3 4\n"),
            None,
            "only the all-CPU line"
        );
        assert_eq!(parse_machine("cpu  1 2\n"), None);
        assert_eq!(parse_machine("cpu  1 x 3 4\n"), None);
        assert!(read_machine().is_some_and(|m| m.total >= m.busy && m.total > 0));
        assert_eq!(
            parse_load_average("5.43 4.35 2.81 3/113 30405\n"),
            Some(5.43)
        );
        assert_eq!(parse_load_average(""), None);
        assert!(load_average().is_some());
    }

    fn auxv(pairs: &[(u64, u64)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (k, v) in pairs {
            if std::mem::size_of::<usize>() == 8 {
                bytes.extend_from_slice(&k.to_ne_bytes());
                bytes.extend_from_slice(&v.to_ne_bytes());
            } else {
                bytes.extend_from_slice(&(*k as u32).to_ne_bytes());
                bytes.extend_from_slice(&(*v as u32).to_ne_bytes());
            }
        }
        bytes
    }

    #[test]
    fn auxv_entries_are_found() {
        let vector = auxv(&[(33, 0x7fff), (6, 4096), (AT_CLKTCK, 250), (AT_NULL, 0)]);
        assert_eq!(auxv_value(&vector, AT_CLKTCK), Some(250));
        assert_eq!(auxv_value(&vector, 6), Some(4096));
        let ended = auxv(&[(6, 4096), (AT_NULL, 0), (AT_CLKTCK, 250)]);
        assert_eq!(auxv_value(&ended, AT_CLKTCK), None, "nothing after AT_NULL");
        assert_eq!(auxv_value(&[], AT_CLKTCK), None);
        assert!(clock_ticks_per_second() > 0);
    }
}
