//! CPU time the hypervisor gave to other guests while this one wanted it: the `steal` column
//! of `/proc/stat`. On a shared virtual machine a step can fail because the broker was not
//! running, not because it was slow; each run records the steal share per CPU so that a
//! noisy measurement shows as noisy instead of passing as the broker's figure.

/// Cumulative (steal, total) clock ticks per CPU, in CPU order.
#[derive(Debug, Clone, Default)]
pub struct CpuTimes(Vec<(u64, u64)>);

impl CpuTimes {
    /// Reads `/proc/stat`; empty where it cannot be read (not Linux).
    pub fn sample() -> CpuTimes {
        std::fs::read_to_string("/proc/stat")
            .map(|s| CpuTimes::parse(&s))
            .unwrap_or_default()
    }

    /// Parses the per-CPU lines (`cpu0 user nice system idle iowait irq softirq steal ...`);
    /// the aggregate `cpu` line and anything malformed are skipped.
    pub fn parse(stat: &str) -> CpuTimes {
        let mut cpus = Vec::new();
        for line in stat.lines() {
            let mut fields = line.split_ascii_whitespace();
            let Some(name) = fields.next() else { continue };
            let Some(n) = name.strip_prefix("cpu") else {
                continue;
            };
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            // guest and guest_nice (fields 9 and 10) are already counted in user and nice.
            let ticks: Vec<u64> = fields.take(8).map_while(|f| f.parse().ok()).collect();
            if ticks.len() == 8 {
                cpus.push((ticks[7], ticks.iter().sum()));
            }
        }
        CpuTimes(cpus)
    }

    /// Percent of each CPU's time stolen between `earlier` and `self`; empty if the two
    /// samples do not describe the same CPUs.
    pub fn steal_percent_since(&self, earlier: &CpuTimes) -> Vec<f64> {
        if self.0.len() != earlier.0.len() {
            return Vec::new();
        }
        self.0
            .iter()
            .zip(&earlier.0)
            .map(|(&(s1, t1), &(s0, t0))| {
                let total = t1.saturating_sub(t0);
                if total == 0 {
                    0.0
                } else {
                    100.0 * s1.saturating_sub(s0) as f64 / total as f64
                }
            })
            .collect()
    }
}

/// The highest of per-CPU percentages (0 when none were measured).
pub fn max_percent(per_cpu: &[f64]) -> f64 {
    per_cpu.iter().copied().fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "cpu  223998 0 102779 1753496 5564 0 39041 98515 0 0\n\
        cpu0 132038 0 48083 851380 4244 0 24764 54079 0 0\n\
        cpu1 91960 0 54696 902116 1320 0 14277 44436 0 0\n\
        intr 1 2 3\nctxt 99\n";
    const AFTER: &str = "cpu  224110 0 103423 1755590 5568 0 39256 99410 0 0\n\
        cpu0 132097 0 48287 852428 4248 0 24907 54632 0 0\n\
        cpu1 92013 0 55136 903162 1320 0 14349 44778 0 0\n";

    #[test]
    fn steal_share_per_cpu() {
        let (a, b) = (CpuTimes::parse(BEFORE), CpuTimes::parse(AFTER));
        let pct = b.steal_percent_since(&a);
        assert_eq!(pct.len(), 2);
        // cpu0: 553 of 2011 ticks stolen; cpu1: 342 of 1953.
        assert!((pct[0] - 100.0 * 553.0 / 2011.0).abs() < 1e-9, "{pct:?}");
        assert!((pct[1] - 100.0 * 342.0 / 1953.0).abs() < 1e-9, "{pct:?}");
        assert!((max_percent(&pct) - pct[0]).abs() < 1e-12);
    }

    #[test]
    fn malformed_or_mismatched_input_gives_nothing() {
        assert!(
            CpuTimes::parse("cpu0 1 2 x\ncpuX 1 2 3 4 5 6 7 8\ngarbage\n\n")
                .0
                .is_empty()
        );
        let two = CpuTimes::parse(BEFORE);
        let one = CpuTimes::parse("cpu0 1 0 1 1 0 0 0 1\n");
        assert!(two.steal_percent_since(&one).is_empty());
        assert_eq!(max_percent(&[]), 0.0);
        // A counter that went backwards (not expected) reads as no steal, not a panic.
        assert_eq!(
            one.steal_percent_since(&CpuTimes::parse("cpu0 9 9 9 9 9 9 9 9\n")),
            vec![0.0]
        );
    }
}
