//! What the bench reads from /proc: a process's memory high-water mark, the
//! CPU time of each of its threads, and the machine it runs on.

use std::fs;

/// The value of a /proc/<pid>/status field, trimmed.
fn status_field<'s>(status: &'s str, field: &str) -> Option<&'s str> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        Some(rest.trim())
    })
}

/// A `kB` field of /proc/<pid>/status (`VmHWM:    12345 kB`), in KiB.
pub(crate) fn status_kib(status: &str, field: &str) -> Option<u64> {
    let mut words = status_field(status, field)?.split_whitespace();
    let value = words.next()?.parse().ok()?;
    (words.next() == Some("kB") && words.next().is_none()).then_some(value)
}

/// A plain number field of /proc/<pid>/status (`Threads:  7`).
pub(crate) fn status_count(status: &str, field: &str) -> Option<u64> {
    status_field(status, field)?.parse().ok()
}

/// How many threads the process has now.
pub(crate) fn threads(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    status_count(&status, "Threads").ok_or_else(|| format!("{path} has no Threads"))
}

/// The process's resident-set high-water mark (`VmHWM`) and its current
/// resident set (`VmRSS`), in KiB.
pub(crate) fn memory_kib(pid: u32) -> Result<(u64, u64), String> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    let field = |name| status_kib(&status, name).ok_or_else(|| format!("{path} has no {name}"));
    Ok((field("VmHWM")?, field("VmRSS")?))
}

/// `/proc` counts CPU time in USER_HZ ticks, fixed at 100 per second by the
/// kernel's ABI whatever the kernel's own tick rate.
const USER_HZ_NS: u64 = 10_000_000;

/// One thread's name and CPU time so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThreadCpu {
    pub(crate) tid: u32,
    pub(crate) name: String,
    /// User + system time, nanoseconds.
    pub(crate) cpu_ns: u64,
}

/// The name and user + system CPU time (ns) of a `/proc/<pid>/task/<tid>/stat`
/// line. The name sits in parentheses and may itself hold spaces or `)`, so
/// the fields are counted from the last `)`.
pub(crate) fn parse_thread_stat(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    let mut fields = stat.get(close + 1..)?.split_whitespace();
    // After the name: state (field 3) … utime (14), stime (15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((name, (utime + stime) * USER_HZ_NS))
}

/// The on-CPU time (ns) of `/proc/<pid>/task/<tid>/schedstat`, whose first
/// field is exact where stat's ticks are 10 ms.
fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Every thread of `pid` with its CPU time: schedstat's nanoseconds where
/// the kernel has them, stat's ticks otherwise. A thread that exits while
/// this reads is skipped.
pub(crate) fn thread_cpu(pid: u32) -> Result<Vec<ThreadCpu>, String> {
    let dir = format!("/proc/{pid}/task");
    let entries = fs::read_dir(&dir).map_err(|e| format!("reading {dir}: {e}"))?;
    let mut threads = Vec::new();
    for entry in entries.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((name, ticks_ns)) = parse_thread_stat(&stat) else {
            continue;
        };
        let cpu_ns = fs::read_to_string(entry.path().join("schedstat"))
            .ok()
            .and_then(|s| parse_schedstat(&s))
            .unwrap_or(ticks_ns);
        threads.push(ThreadCpu { tid, name, cpu_ns });
    }
    Ok(threads)
}

/// The first `model name` of /proc/cpuinfo.
pub(crate) fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// The machine a run was made on, as the report prints it.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    pub(crate) cpus: usize,
    pub(crate) cpu_model: String,
    pub(crate) mem_total_mib: u64,
    /// The 1-minute load average when the run started: others' builds show
    /// here.
    pub(crate) load_at_start: String,
    pub(crate) kernel: String,
}

impl Machine {
    pub(crate) fn read() -> Machine {
        let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
        let meminfo = read("/proc/meminfo");
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            cpu_model: cpu_model(&read("/proc/cpuinfo")).unwrap_or_else(|| "unknown".into()),
            mem_total_mib: status_kib(&meminfo, "MemTotal").unwrap_or(0) / 1024,
            load_at_start: read("/proc/loadavg")
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        }
    }

    /// The current load averages (1, 5, 15 min).
    pub(crate) fn load_now() -> String {
        fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\ttc-server\nVmPeak:\t  912345 kB\nVmHWM:\t   23456 kB\n\
                          VmRSS:\t   20480 kB\nThreads:\t7\nVmSwap:\t0 kB\n";

    #[test]
    fn status_fields_in_kib() {
        let check = |text: &str, field: &str, want: Option<u64>| {
            assert_eq!(status_kib(text, field), want, "{field} in {text:?}");
        };
        check(STATUS, "VmHWM", Some(23456));
        check(STATUS, "VmRSS", Some(20480));
        check(STATUS, "VmSwap", Some(0));
        // A field name that prefixes another is not that field.
        check(STATUS, "Vm", None);
        check(STATUS, "Threads", None);
        check(STATUS, "VmData", None);
        check("VmHWM:\tlots kB\n", "VmHWM", None);
        check("VmHWM:\t12 MB\n", "VmHWM", None);
        check("MemTotal:       24683568 kB\n", "MemTotal", Some(24683568));
    }

    #[test]
    fn status_counts() {
        assert_eq!(status_count(STATUS, "Threads"), Some(7));
        assert_eq!(status_count(STATUS, "VmHWM"), None);
        assert_eq!(status_count(STATUS, "Thread"), None);
    }

    #[test]
    fn reads_our_own_memory() {
        let (hwm, rss) = memory_kib(std::process::id()).unwrap();
        assert!(hwm >= rss && rss > 0, "hwm {hwm} rss {rss}");
    }

    #[test]
    fn cpu_model_is_the_first_model_name() {
        let info = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 1\n\
                    model name\t: AMD EPYC\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(cpu_model(info).as_deref(), Some("AMD EPYC"));
        assert_eq!(cpu_model("processor: 0\n"), None);
    }
    #[test]
    fn thread_stat_lines() {
        let check = |line: &str, want: Option<(&str, u64)>| {
            assert_eq!(
                parse_thread_stat(line),
                want.map(|(n, ns)| (n.to_owned(), ns)),
                "{line}"
            );
        };
        check(
            "4242 (tc-store-writer) S 1 2 3 0 -1 4194368 10 0 0 0 150 25 0 0 20 0 9 0 5 6 7",
            Some(("tc-store-writer", 175 * USER_HZ_NS)),
        );
        // A name with spaces and a parenthesis of its own.
        check(
            "7 (a b) c) R 1 2 3 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 5 6 7",
            Some(("a b) c", 7 * USER_HZ_NS)),
        );
        check("7 (short) R 1 2", None);
        check("no parentheses at all", None);
        assert_eq!(parse_schedstat("123456 789 10\n"), Some(123456));
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn reads_our_own_threads() {
        let threads = thread_cpu(std::process::id()).unwrap();
        assert!(
            threads.iter().any(|t| t.tid == std::process::id()),
            "{threads:?}"
        );
    }
}
