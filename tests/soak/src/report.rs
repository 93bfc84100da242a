//! The soak's output: `samples.csv` (one row per process per sample,
//! written as the run goes), and at the end `summary.md`: the load done,
//! a table of means per period, and the verdict. The verdict compares, for
//! every process and every measure, the mean over the second third of the
//! run (after warm-up) with the mean over the last third: a growth beyond
//! the measure's limit ([`limit`]) fails the run. An upstream server that
//! is not ours (server-everything, on Node) is reported but does not fail
//! it: its heap is its own.

use crate::load::Stats;
use crate::procs::ProcSample;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

/// One CSV row kept for the summary.
#[derive(Debug, Clone)]
struct Row {
    elapsed: f64,
    sample: ProcSample,
}

/// Writes the CSV as samples come, and keeps them for the summary.
#[derive(Debug)]
pub struct Recorder {
    csv: std::io::BufWriter<std::fs::File>,
    rows: Vec<Row>,
    load_at_start: String,
}

/// The run's verdict.
#[derive(Debug)]
pub struct Verdict {
    /// Nothing of ours grew beyond its limit.
    pub flat: bool,
    /// The verdict's lines, as in the summary.
    pub text: String,
}

/// The measures compared, with how to read them from a sample.
/// Reads one measure from a sample (`None`: the process has no such
/// measure).
type Measure = fn(&ProcSample) -> Option<f64>;

const MEASURES: [(&str, Measure); 5] = [
    ("rss_kib", |s| Some(s.rss_kib as f64)),
    ("fds", |s| Some(s.fds as f64)),
    ("threads", |s| Some(s.threads as f64)),
    ("alive_tasks", |s| s.alive_tasks.map(|v| v as f64)),
    ("store_keys", |s| s.store_keys.map(|v| v as f64)),
];

/// The largest growth of a measure's mean (last third against second
/// third) that still counts as flat, given the second third's mean: an
/// absolute floor (the noise of a busy machine and of allocators) or a
/// share of the value, whichever is larger.
pub fn limit(measure: &str, base: f64) -> f64 {
    match measure {
        // 1 MiB or 5 %.
        "rss_kib" => f64::max(1024.0, base * 0.05),
        "fds" => f64::max(3.0, base * 0.10),
        "threads" => 2.0,
        "alive_tasks" => f64::max(5.0, base * 0.10),
        "store_keys" => f64::max(10.0, base * 0.10),
        _ => 0.0,
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn opt(v: Option<i64>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Whether a process is not ours (its growth is reported, not failed).
fn third_party(process: &str) -> bool {
    process == "upstream:everything"
}

impl Recorder {
    /// Creates the CSV with its header.
    pub fn create(path: &Path) -> anyhow::Result<Recorder> {
        let mut csv = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(
            csv,
            "elapsed_s,process,pids,rss_kib,fds,threads,alive_tasks,store_keys,sessions"
        )?;
        Ok(Recorder {
            csv,
            rows: Vec::new(),
            load_at_start: loadavg(),
        })
    }

    /// Appends one sample of every process.
    pub fn record(&mut self, elapsed: f64, sample: &[ProcSample]) -> anyhow::Result<()> {
        for s in sample {
            let pids = s
                .pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" ");
            writeln!(
                self.csv,
                "{elapsed:.1},{},{pids},{},{},{},{},{},{}",
                s.process,
                s.rss_kib,
                s.fds,
                s.threads,
                opt(s.alive_tasks),
                opt(s.store_keys),
                opt(s.sessions)
            )?;
            self.rows.push(Row {
                elapsed,
                sample: s.clone(),
            });
        }
        self.csv.flush()?;
        Ok(())
    }

    fn processes(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for r in &self.rows {
            if !names.contains(&r.sample.process) {
                names.push(r.sample.process.clone());
            }
        }
        names
    }

    fn values(&self, process: &str, measure: Measure, from: f64, to: f64) -> Vec<f64> {
        self.rows
            .iter()
            .filter(|r| r.sample.process == process && r.elapsed >= from && r.elapsed < to)
            .filter_map(|r| measure(&r.sample))
            .collect()
    }

    /// Writes `summary.md` and returns the verdict.
    pub fn finish(
        self,
        path: &Path,
        stats: &Stats,
        period: Duration,
        cli: &crate::Cli,
    ) -> anyhow::Result<Verdict> {
        let end = self.rows.last().map_or(0.0, |r| r.elapsed) + 0.05;
        let processes = self.processes();
        let mut md = String::new();
        md.push_str(&format!(
            "# Soak summary\n\n{} min of load, a sample every {} s ({} samples per process); load average {} at the start, {} at the end, on {} cores.\n\n",
            cli.minutes,
            cli.sample_secs,
            self.rows.iter().filter(|r| r.sample.process == "control-plane").count(),
            self.load_at_start,
            loadavg(),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ));

        md.push_str(
            "## Load\n\n| operation | ok | failed | first failures |\n|---|---:|---:|---|\n",
        );
        for (kind, s) in stats.snapshot() {
            md.push_str(&format!(
                "| `{kind}` | {} | {} | {} |\n",
                s.ok,
                s.failed,
                s.first_errors
                    .iter()
                    .map(|e| e.replace('|', "/").replace('\n', " "))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }

        md.push_str(&format!(
            "\n## Means per {} minutes\n\nEach cell: RSS in MiB / open fds / threads, then live tokio tasks where the process reports them.\n\n| minutes |",
            period.as_secs() / 60
        ));
        for p in &processes {
            md.push_str(&format!(" {p} |"));
        }
        md.push_str(" store keys | sessions |\n|---|");
        for _ in &processes {
            md.push_str("---|");
        }
        md.push_str("---:|---:|\n");
        let step = period.as_secs_f64();
        let mut from = 0.0;
        while from < end {
            let to = from + step;
            md.push_str(&format!(
                "| {:.0}–{:.0} |",
                from / 60.0,
                (to.min(end)) / 60.0
            ));
            for p in &processes {
                let m = |measure: Measure| mean(&self.values(p, measure, from, to));
                let cell = match (m(MEASURES[0].1), m(MEASURES[1].1), m(MEASURES[2].1)) {
                    (Some(rss), Some(fds), Some(threads)) => {
                        let mut cell = format!("{:.1} / {:.0} / {:.0}", rss / 1024.0, fds, threads);
                        if let Some(tasks) = m(MEASURES[3].1) {
                            cell.push_str(&format!(", {tasks:.0} tasks"));
                        }
                        cell
                    }
                    _ => "-".into(),
                };
                md.push_str(&format!(" {cell} |"));
            }
            let keys = mean(&self.values("control-plane", MEASURES[4].1, from, to));
            let sessions =
                mean(&self.values("control-plane", |s| s.sessions.map(|v| v as f64), from, to));
            md.push_str(&format!(
                " {} | {} |\n",
                keys.map_or("-".into(), |v| format!("{v:.0}")),
                sessions.map_or("-".into(), |v| format!("{v:.1}"))
            ));
            from = to;
        }

        let third = end / 3.0;
        let mut flat = true;
        let mut verdict = String::new();
        verdict.push_str(&format!(
            "\n## Verdict\n\nMean of the second third ({:.0}–{:.0} s, after warm-up) against the mean of the last third ({:.0}–{:.0} s). The limit is the growth still called flat.\n\n| process | measure | first third | second third | last third | growth | limit | result |\n|---|---|---:|---:|---:|---:|---:|---|\n",
            third,
            2.0 * third,
            2.0 * third,
            end
        ));
        for p in &processes {
            for (name, measure) in MEASURES {
                let (Some(first), Some(second), Some(last)) = (
                    mean(&self.values(p, measure, 0.0, third)),
                    mean(&self.values(p, measure, third, 2.0 * third)),
                    mean(&self.values(p, measure, 2.0 * third, end)),
                ) else {
                    continue;
                };
                let growth = last - second;
                let allowed = limit(name, second);
                let result = if growth <= allowed {
                    "flat"
                } else if third_party(p) {
                    "grows (not ours: reported only)"
                } else {
                    flat = false;
                    "**GROWS**"
                };
                verdict.push_str(&format!(
                    "| {p} | {name} | {first:.1} | {second:.1} | {last:.1} | {growth:+.1} | {allowed:.1} | {result} |\n"
                ));
            }
        }
        let failed: u64 = stats.snapshot().values().map(|s| s.failed).sum();
        let ok: u64 = stats.snapshot().values().map(|s| s.ok).sum();
        verdict.push_str(&format!(
            "\n**{}**: {ok} operations succeeded, {failed} failed.\n",
            if flat { "FLAT" } else { "GROWS" }
        ));
        md.push_str(&verdict);
        std::fs::write(path, &md)?;
        Ok(Verdict {
            flat,
            text: verdict,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_have_a_floor_and_a_share() {
        assert_eq!(limit("rss_kib", 10_000.0), 1024.0);
        assert_eq!(limit("rss_kib", 100_000.0), 5_000.0);
        assert_eq!(limit("fds", 20.0), 3.0);
        assert_eq!(limit("store_keys", 1_000.0), 100.0);
    }
}
