//! `--gpu-metrics`: GPU power, utilisation and memory sampled beside a benchmark, from
//! `nvidia-smi` on this host or a DCGM exporter's Prometheus endpoint, summed up over
//! the measured window into energy per output token and tokens/s per GPU.
//!
//! Energy is, per GPU, the difference of its energy counter over the measured window when
//! the source has one (DCGM's `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, mJ), read at the
//! window's ends by linear interpolation between the samples around each end; otherwise
//! the mean of its power over the samples taken within the window times the window's
//! length (all samples when the window is shorter than one interval). A sample that
//! fails is counted, never waited on past its timeout.

use llmsurge_proto::limits;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Where the samples come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuSource {
    /// `nvidia-smi --query-gpu=index,power.draw,utilization.gpu,memory.used` on `PATH`.
    NvidiaSmi,
    /// A DCGM exporter's `/metrics` URL (`DCGM_FI_DEV_POWER_USAGE`, `DCGM_FI_DEV_GPU_UTIL`,
    /// `DCGM_FI_DEV_FB_USED`, `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, labelled by `gpu`).
    Dcgm(String),
}

/// What to sample and how often.
#[derive(Clone, Debug)]
pub struct GpuConfig {
    /// The source.
    pub source: GpuSource,
    /// Time between two samples.
    pub interval: Duration,
}

/// One GPU at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuReading {
    /// The GPU's index.
    pub index: u32,
    /// Power draw, W.
    pub power_w: f64,
    /// Utilisation, %.
    pub util_pct: Option<f64>,
    /// Memory used, MiB.
    pub memory_mib: Option<f64>,
    /// The energy counter, mJ since an arbitrary start (DCGM), when the source has one.
    pub energy_mj: Option<f64>,
}

/// How a benchmark's energy was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// The difference of the GPU's energy counter over the window.
    Counter,
    /// Its mean sampled power times the window.
    IntegratedPower,
    /// Some GPUs by their counter, the others by their power (the total only).
    Mixed,
}

/// One GPU over the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSummary {
    /// The GPU's index.
    pub index: u32,
    /// Mean power, W.
    pub power_mean_w: f64,
    /// Highest power sampled, W.
    pub power_max_w: f64,
    /// Energy over the measured window, J.
    pub energy_j: f64,
    /// Where the energy comes from (absent in reports written before it was added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_source: Option<EnergySource>,
    /// Mean utilisation, %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_mean_pct: Option<f64>,
    /// Highest memory used, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_mib: Option<f64>,
}

/// A benchmark's GPU figures: per GPU and summed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuMetrics {
    /// `nvidia-smi` or the DCGM URL.
    pub source: String,
    /// Samples taken within the window (every sample when none fell inside it).
    pub samples: u32,
    /// Samples that failed.
    pub failed_samples: u32,
    /// The last failure, one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// GPUs seen.
    pub gpus: u32,
    /// Summed mean power, W.
    pub power_mean_w: f64,
    /// Highest summed power sampled, W.
    pub power_max_w: f64,
    /// Summed energy over the measured window, J.
    pub energy_j: f64,
    /// Where the energy comes from (absent in reports written before it was added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_source: Option<EnergySource>,
    /// Energy per output token, J.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joules_per_output_token: Option<f64>,
    /// Output tokens/s divided by the GPUs seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_s_per_gpu: Option<f64>,
    /// Mean utilisation over the GPUs, %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_mean_pct: Option<f64>,
    /// Summed highest memory used, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_mib: Option<f64>,
    /// Per GPU.
    pub per_gpu: Vec<GpuSummary>,
    /// Every sample of the benchmark (the measured window and around it), for the
    /// charts over the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<GpuPoint>,
}

/// The GPUs at one sample, summed (power, memory) or averaged (utilisation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuPoint {
    /// When it was sampled, Unix seconds.
    pub time: f64,
    /// Power of all GPUs, W.
    pub power_w: f64,
    /// Mean utilisation over the GPUs that report it, %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_pct: Option<f64>,
    /// Memory used on all GPUs that report it, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<f64>,
}

impl GpuPoint {
    /// The point of the readings sampled at `time`.
    fn of(time: f64, readings: &[GpuReading]) -> Self {
        let util: Vec<f64> = readings.iter().filter_map(|r| r.util_pct).collect();
        let mem: Vec<f64> = readings.iter().filter_map(|r| r.memory_mib).collect();
        GpuPoint {
            time,
            power_w: readings.iter().map(|r| r.power_w).sum(),
            util_pct: (!util.is_empty()).then(|| util.iter().sum::<f64>() / util.len() as f64),
            memory_mib: (!mem.is_empty()).then(|| mem.iter().sum()),
        }
    }
}

impl GpuMetrics {
    /// One line for the console and HTML notes: power, energy and J per token.
    pub fn note(&self) -> String {
        let g = self;
        // Every sample failed: no figure was measured, and zeros would read as one.
        if g.gpus == 0 {
            return format!(
                "GPU ({}): nothing measured, {} samples failed ({})",
                g.source,
                g.failed_samples,
                g.last_error.as_deref().unwrap_or("")
            );
        }
        let mut line = format!(
            "GPU ({}, {} GPU{}): mean power {:.0} W (max {:.0} W), energy {:.1} J{}",
            g.source,
            g.gpus,
            if g.gpus == 1 { "" } else { "s" },
            g.power_mean_w,
            g.power_max_w,
            g.energy_j,
            match g.energy_source {
                Some(EnergySource::Counter) => " (energy counter)",
                Some(EnergySource::IntegratedPower) => " (power × window)",
                Some(EnergySource::Mixed) => " (energy counters and power × window)",
                None => "",
            }
        );
        if let Some(j) = g.joules_per_output_token {
            line.push_str(&format!(", {j:.4} J per output token"));
        }
        if let Some(t) = g.output_tokens_per_s_per_gpu {
            line.push_str(&format!(", {t:.1} output tokens/s per GPU"));
        }
        if g.failed_samples > 0 {
            line.push_str(&format!(
                "; {} samples failed ({})",
                g.failed_samples,
                g.last_error.as_deref().unwrap_or("")
            ));
        }
        line
    }
}

/// Parses `nvidia-smi --query-gpu=index,power.draw,utilization.gpu,memory.used
/// --format=csv,noheader,nounits` output.
pub fn parse_nvidia_smi(text: &str) -> Result<Vec<GpuReading>, String> {
    let num = |s: &str| s.trim().parse::<f64>().ok();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(index), Some(power)) = (
            f.first().and_then(|s| s.trim().parse::<u32>().ok()),
            f.get(1).and_then(|s| num(s)),
        ) else {
            return Err(format!(
                "nvidia-smi printed {line:?}, not index, power.draw, …"
            ));
        };
        out.push(GpuReading {
            index,
            power_w: power,
            util_pct: f.get(2).and_then(|s| num(s)),
            memory_mib: f.get(3).and_then(|s| num(s)),
            energy_mj: None,
        });
    }
    if out.is_empty() {
        return Err("nvidia-smi listed no GPU".into());
    }
    Ok(out)
}

/// Reads a DCGM exporter's series, per `gpu` label.
pub fn parse_dcgm(text: &str) -> Result<Vec<GpuReading>, String> {
    let mut by_gpu: BTreeMap<u32, GpuReading> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i..]),
            None => continue,
        };
        let Some(close) = rest.find('}') else {
            continue;
        };
        let labels = &rest[1..close];
        let Some(value) = rest[close + 1..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let Some(gpu) = labels.split(',').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k.trim() == "gpu").then(|| v.trim().trim_matches('"').parse::<u32>().ok())?
        }) else {
            continue;
        };
        let r = by_gpu.entry(gpu).or_insert(GpuReading {
            index: gpu,
            power_w: f64::NAN,
            util_pct: None,
            memory_mib: None,
            energy_mj: None,
        });
        match name {
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => r.energy_mj = Some(value),
            "DCGM_FI_DEV_POWER_USAGE" => r.power_w = value,
            "DCGM_FI_DEV_GPU_UTIL" => r.util_pct = Some(value),
            "DCGM_FI_DEV_FB_USED" => r.memory_mib = Some(value),
            _ => {}
        }
    }
    let out: Vec<GpuReading> = by_gpu
        .into_values()
        .filter(|r| r.power_w.is_finite())
        .collect();
    if out.is_empty() {
        return Err("no DCGM_FI_DEV_POWER_USAGE series with a gpu label".into());
    }
    Ok(out)
}

/// Takes one sample.
pub async fn sample(source: &GpuSource, timeout: Duration) -> Result<Vec<GpuReading>, String> {
    match source {
        GpuSource::NvidiaSmi => {
            let run = tokio::process::Command::new("nvidia-smi")
                .args([
                    "--query-gpu=index,power.draw,utilization.gpu,memory.used",
                    "--format=csv,noheader,nounits",
                ])
                .kill_on_drop(true)
                .output();
            let out = tokio::time::timeout(timeout, run)
                .await
                .map_err(|_| {
                    format!(
                        "nvidia-smi gave no answer within {}s",
                        timeout.as_secs_f64()
                    )
                })?
                .map_err(|e| format!("cannot run nvidia-smi: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "nvidia-smi failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout))
        }
        GpuSource::Dcgm(url) => {
            let client = llmsurge_proto::http::client_builder(url, &Default::default())
                .map_err(|e| e.to_string())?
                .timeout(timeout)
                .build()
                .map_err(|e| e.to_string())?;
            let shown = llmsurge_proto::Redaction::default().url(url);
            let r = client.get(url).send().await.map_err(|e| {
                // The cause with its fix (a host that does not resolve) where there
                // is one, as for the target; else the innermost message.
                let cause = llmsurge_proto::http::connect_problem(&e)
                    .map_or_else(|| llmsurge_proto::http::root_cause(&e), |p| p.line());
                format!("GET {shown}: {cause}")
            })?;
            if !r.status().is_success() {
                return Err(format!("GET {shown}: HTTP {}", r.status()));
            }
            let page = llmsurge_proto::http::read_limited(r, limits::METRICS_PAGE)
                .await
                .map_err(|e| format!("GET {shown}: reading the answer: {e}"))?;
            parse_dcgm(&String::from_utf8_lossy(&page))
        }
    }
}

/// The samples of one benchmark, each with its Unix time.
#[derive(Debug, Default)]
pub struct GpuLog {
    /// `(unix seconds, readings)`.
    pub samples: Vec<(f64, Vec<GpuReading>)>,
    /// Samples that failed.
    pub failed: u32,
    /// The last failure.
    pub last_error: Option<String>,
}

/// A sampler running beside a benchmark.
#[derive(Debug)]
pub struct GpuSampler {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<GpuLog>,
    source: GpuSource,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl GpuSampler {
    /// Starts sampling now, every `cfg.interval`.
    pub fn start(cfg: GpuConfig) -> Self {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let source = cfg.source.clone();
        let task = tokio::spawn(async move {
            let mut log = GpuLog::default();
            let timeout = cfg
                .interval
                .clamp(Duration::from_secs(1), Duration::from_secs(5));
            let mut tick = tokio::time::interval(cfg.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
                let at = unix_now();
                match sample(&cfg.source, timeout).await {
                    Ok(r) => log.samples.push((at, r)),
                    Err(e) => {
                        log.failed += 1;
                        log.last_error = Some(e);
                    }
                }
            }
            // One last sample closes the window.
            let at = unix_now();
            match sample(&cfg.source, timeout).await {
                Ok(r) => log.samples.push((at, r)),
                Err(e) => {
                    log.failed += 1;
                    log.last_error = Some(e);
                }
            }
            log
        });
        Self { stop, task, source }
    }

    /// Stops sampling and sums up over the window `[start, end]` (Unix seconds).
    pub async fn finish(
        self,
        start: f64,
        end: f64,
        output_tokens_per_s: Option<f64>,
    ) -> GpuMetrics {
        let _ = self.stop.send(true);
        let log = self.task.await.unwrap_or_default();
        let source = match &self.source {
            GpuSource::NvidiaSmi => "nvidia-smi".to_string(),
            GpuSource::Dcgm(u) => llmsurge_proto::Redaction::default().url(u),
        };
        summarise(source, &log, start, end, output_tokens_per_s)
    }
}

/// GPU `index`'s energy over `[start, end]` from its counter, J: the counter read at
/// each end by linear interpolation between the samples around it (extrapolated from the
/// nearest two when no sample lies beyond an end). `None` without two counter samples,
/// or when the counter went down (a reset) or the window lies outside the samples by
/// more than its own length.
fn counter_energy_j(
    samples: &[(f64, Vec<GpuReading>)],
    index: u32,
    start: f64,
    end: f64,
) -> Option<f64> {
    let mut points: Vec<(f64, f64)> = samples
        .iter()
        .filter_map(|(t, rs)| {
            let e = rs.iter().find(|r| r.index == index)?.energy_mj?;
            e.is_finite().then_some((*t, e))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points.dedup_by(|a, b| a.0 == b.0);
    if points.len() < 2 || points.windows(2).any(|w| w[1].1 < w[0].1) || end < start {
        return None;
    }
    let (first, last) = (points[0].0, points[points.len() - 1].0);
    let reach = end - start;
    if start < first - reach || end > last + reach {
        return None;
    }
    let at = |t: f64| {
        // The pair of samples around t, or the nearest pair at either end.
        let i = points
            .windows(2)
            .position(|w| t <= w[1].0)
            .unwrap_or(points.len() - 2);
        let ((t0, e0), (t1, e1)) = (points[i], points[i + 1]);
        e0 + (e1 - e0) * (t - t0) / (t1 - t0)
    };
    let mj = at(end) - at(start);
    (mj.is_finite() && mj >= 0.0).then(|| mj / 1000.0)
}

/// Sums a log up over the window `[start, end]` (Unix seconds).
pub fn summarise(
    source: String,
    log: &GpuLog,
    start: f64,
    end: f64,
    output_tokens_per_s: Option<f64>,
) -> GpuMetrics {
    let inside: Vec<&(f64, Vec<GpuReading>)> = log
        .samples
        .iter()
        .filter(|(t, _)| *t >= start && *t <= end)
        .collect();
    let used: Vec<&(f64, Vec<GpuReading>)> = if inside.is_empty() {
        log.samples.iter().collect()
    } else {
        inside
    };
    let duration = (end - start).max(0.0);
    let mut per: BTreeMap<u32, Vec<&GpuReading>> = BTreeMap::new();
    for (_, readings) in &used {
        for r in readings {
            per.entry(r.index).or_default().push(r);
        }
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let per_gpu: Vec<GpuSummary> = per
        .iter()
        .map(|(index, rs)| {
            let power: Vec<f64> = rs.iter().map(|r| r.power_w).collect();
            let util: Vec<f64> = rs.iter().filter_map(|r| r.util_pct).collect();
            let mem: Vec<f64> = rs.iter().filter_map(|r| r.memory_mib).collect();
            let p = mean(&power).unwrap_or(0.0);
            let counted = counter_energy_j(&log.samples, *index, start, end);
            GpuSummary {
                index: *index,
                power_mean_w: p,
                power_max_w: power.iter().copied().fold(0.0, f64::max),
                energy_j: counted.unwrap_or(p * duration),
                energy_source: Some(if counted.is_some() {
                    EnergySource::Counter
                } else {
                    EnergySource::IntegratedPower
                }),
                util_mean_pct: mean(&util),
                memory_max_mib: (!mem.is_empty()).then(|| mem.iter().copied().fold(0.0, f64::max)),
            }
        })
        .collect();
    let gpus = per_gpu.len() as u32;
    // Summed from 0.0: an empty sum of f64 is -0.0, printed "-0 W" and stored as -0.0.
    let power_mean_w: f64 = per_gpu
        .iter()
        .map(|g| g.power_mean_w)
        .fold(0.0, |a, b| a + b);
    let energy_j: f64 = per_gpu.iter().map(|g| g.energy_j).fold(0.0, |a, b| a + b);
    let by_counter = per_gpu
        .iter()
        .filter(|g| g.energy_source == Some(EnergySource::Counter))
        .count();
    let energy_source = match by_counter {
        _ if per_gpu.is_empty() => None,
        0 => Some(EnergySource::IntegratedPower),
        n if n == per_gpu.len() => Some(EnergySource::Counter),
        _ => Some(EnergySource::Mixed),
    };
    let tokens = output_tokens_per_s.map(|r| r * duration);
    let utils: Vec<f64> = per_gpu.iter().filter_map(|g| g.util_mean_pct).collect();
    let mems: Vec<f64> = per_gpu.iter().filter_map(|g| g.memory_max_mib).collect();
    GpuMetrics {
        source,
        samples: used.len() as u32,
        failed_samples: log.failed,
        last_error: log.last_error.clone(),
        gpus,
        power_mean_w,
        power_max_w: used
            .iter()
            .map(|(_, rs)| rs.iter().map(|r| r.power_w).sum::<f64>())
            .fold(0.0, f64::max),
        energy_j,
        energy_source,
        joules_per_output_token: tokens
            .filter(|t| *t > 0.0 && gpus > 0)
            .map(|t| energy_j / t),
        output_tokens_per_s_per_gpu: output_tokens_per_s
            .filter(|_| gpus > 0)
            .map(|r| r / f64::from(gpus)),
        util_mean_pct: mean(&utils),
        memory_max_mib: (!mems.is_empty()).then(|| mems.iter().sum()),
        per_gpu,
        series: log
            .samples
            .iter()
            .map(|(time, readings)| GpuPoint::of(*time, readings))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_and_dcgm_read_the_same_figures() {
        let smi = parse_nvidia_smi("0, 300.00, 50, 1024\n1, 250.5, 40, 2048\n").expect("smi");
        let dcgm = parse_dcgm(
            "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n\
             DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"a\"} 300\n\
             DCGM_FI_DEV_POWER_USAGE{gpu=\"1\",UUID=\"b\"} 250.5\n\
             DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 50\nDCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} 40\n\
             DCGM_FI_DEV_FB_USED{gpu=\"0\"} 1024\nDCGM_FI_DEV_FB_USED{gpu=\"1\"} 2048\n",
        )
        .expect("dcgm");
        assert_eq!(smi, dcgm);
        assert!(parse_nvidia_smi("garbage").is_err());
    }

    #[test]
    fn energy_is_mean_power_times_the_window() {
        let r = |p| {
            vec![GpuReading {
                index: 0,
                power_w: p,
                util_pct: None,
                memory_mib: None,
                energy_mj: None,
            }]
        };
        let log = GpuLog {
            samples: vec![
                (9.0, r(1000.0)),
                (10.0, r(100.0)),
                (12.0, r(300.0)),
                (15.0, r(1000.0)),
            ],
            failed: 0,
            last_error: None,
        };
        let m = summarise("x".into(), &log, 10.0, 14.0, Some(50.0));
        assert_eq!(m.samples, 2);
        assert_eq!(m.energy_j, 200.0 * 4.0);
        assert_eq!(m.energy_source, Some(EnergySource::IntegratedPower));
        assert_eq!(m.joules_per_output_token, Some(800.0 / 200.0));
        assert_eq!(m.power_max_w, 300.0);
        // The series keeps every sample, outside the window too.
        let series: Vec<(f64, f64)> = m.series.iter().map(|p| (p.time, p.power_w)).collect();
        assert_eq!(
            series,
            [(9.0, 1000.0), (10.0, 100.0), (12.0, 300.0), (15.0, 1000.0)]
        );
    }

    #[test]
    fn an_energy_counter_gives_the_energy_over_the_window_not_the_power() {
        // GPU 0 reports 100 W but its counter grows 200 J/s: the counter is the truth
        // (power is sampled, the counter counts every joule). GPU 1 has no counter.
        let r = |t: f64| {
            vec![
                GpuReading {
                    index: 0,
                    power_w: 100.0,
                    util_pct: None,
                    memory_mib: None,
                    energy_mj: Some(5.0e6 + 200.0 * 1000.0 * t),
                },
                GpuReading {
                    index: 1,
                    power_w: 100.0,
                    util_pct: None,
                    memory_mib: None,
                    energy_mj: None,
                },
            ]
        };
        let log = GpuLog {
            samples: [9.0, 10.5, 12.0, 13.5, 15.0]
                .iter()
                .map(|&t| (t, r(t)))
                .collect(),
            failed: 0,
            last_error: None,
        };
        // The window's ends fall between samples: read by interpolation.
        let m = summarise("x".into(), &log, 10.0, 14.0, Some(50.0));
        let (g0, g1) = (&m.per_gpu[0], &m.per_gpu[1]);
        assert!((g0.energy_j - 200.0 * 4.0).abs() < 1e-6, "{g0:?}");
        assert_eq!(g0.energy_source, Some(EnergySource::Counter));
        assert_eq!(g1.energy_j, 100.0 * 4.0);
        assert_eq!(g1.energy_source, Some(EnergySource::IntegratedPower));
        assert_eq!(m.energy_source, Some(EnergySource::Mixed));
        assert!((m.energy_j - 1200.0).abs() < 1e-6);
        // Beyond the samples: extrapolated from the nearest two.
        let m = summarise("x".into(), &log, 14.0, 16.0, None);
        assert!((m.per_gpu[0].energy_j - 400.0).abs() < 1e-6, "{m:?}");
        // A counter that went down (a reset) is not used.
        let mut reset = log.samples.clone();
        if let Some(e) = reset[2].1[0].energy_mj.as_mut() {
            *e = 0.0;
        }
        let log = GpuLog {
            samples: reset,
            failed: 0,
            last_error: None,
        };
        let m = summarise("x".into(), &log, 10.0, 14.0, None);
        assert_eq!(
            m.per_gpu[0].energy_source,
            Some(EnergySource::IntegratedPower)
        );
    }
}
