//! The `process_*` families every Prometheus client exports (CPU, memory, descriptors, threads,
//! start time) and `event_series_build_info`, read from `/proc/self` at each scrape, so that a
//! dashboard built for any operator shows this one too and a leak of memory or descriptors shows
//! over months of uptime.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Reads `/proc/self` when scraped; on a system without it, exports nothing.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What `/proc/self` says of this process now.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: i64,
    pub virtual_bytes: i64,
    pub open_fds: i64,
    pub max_fds: i64,
    pub threads: i64,
    pub start_time_seconds: f64,
}

impl ProcessStats {
    /// `None` where `/proc/self` cannot be read.
    pub fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as i64);
        // SAFETY: sysconf only reads a constant of the system.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        parse(&stat, &status, &limits, &boot, ticks, open_fds)
    }
}

/// The parsing of [`ProcessStats::read`], on the files' texts.
fn parse(
    stat: &str,
    status: &str,
    limits: &str,
    boot: &str,
    ticks: f64,
    open_fds: i64,
) -> Option<ProcessStats> {
    // The command name (field 2) may hold spaces and parentheses: fields start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the name, field 3 (state) is index 0: utime 14, stime 15, starttime 22.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| {
                l.strip_prefix(key)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse::<i64>()
                    .ok()
            })
            .map_or(0, |k| k * 1024)
    };
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok())
        .unwrap_or(0);
    let max_fds = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .unwrap_or(0);
    let btime = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) / ticks,
        resident_bytes: kib("VmRSS:"),
        virtual_bytes: kib("VmSize:"),
        open_fds,
        max_fds,
        threads,
        start_time_seconds: btime + field(22)? / ticks,
    })
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(p.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, f64); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                p.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                p.virtual_bytes as f64,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                p.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                p.max_fds as f64,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                p.threads as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                p.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_proc_files_of_a_process_with_an_awkward_name() {
        let stat = "4242 (event (series) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 \
                    9 0 123400 73400320 2500 18446744073709551615";
        let status =
            "Name:\tevent-series\nVmSize:\t   71680 kB\nVmRSS:\t   10240 kB\nThreads:\t9\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 4096                 files\n";
        let boot = "cpu  1 2 3\nbtime 1800000000\n";
        let p = parse(stat, status, limits, boot, 100.0, 17).unwrap();
        assert_eq!(
            p,
            ProcessStats {
                cpu_seconds: 3.0,
                resident_bytes: 10240 * 1024,
                virtual_bytes: 71680 * 1024,
                open_fds: 17,
                max_fds: 1024,
                threads: 9,
                start_time_seconds: 1_800_000_000.0 + 1234.0,
            }
        );
        assert_eq!(parse("garbage", status, limits, boot, 100.0, 1), None);
    }

    #[test]
    fn this_process_reads_itself() {
        let p = ProcessStats::read().expect("/proc/self on Linux");
        assert!(p.resident_bytes > 0 && p.open_fds > 0 && p.max_fds >= p.open_fds);
        assert!(p.threads >= 1 && p.start_time_seconds > 1_600_000_000.0);
    }
}
