//! What the bench reads from /proc: a process's memory high-water mark and
//! the machine it runs on.

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
}
