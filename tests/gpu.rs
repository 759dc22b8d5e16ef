//! `--gpu-metrics`: a fake `nvidia-smi` first on `PATH` reports 300 W on each of 2 GPUs;
//! the energy per output token must be 600 W × the measured window ÷ the output tokens
//! the mock sent.

use crate::scenario::Bench;
use crate::support::mock;
use llmsurge::mock::MockConfig;
use std::os::unix::fs::PermissionsExt;

/// How late the client may stamp one read of the mock's energy counter after the mock
/// computed it: loopback plus a busy 2-core runner descheduling the scraper's thread.
/// An energy over a window of counter reads may be off by the power over two of these
/// (one read at each edge); the runs below last about 3 s, so that is a few percent.
const READ_LATE_S: f64 = 0.05;

/// Whether `energy_j` is `power_w` over `window_s`, as far as two reads' stamps allow.
fn energy_close(energy_j: f64, power_w: f64, window_s: f64) -> bool {
    (energy_j - power_w * window_s).abs() <= power_w * (2.0 * READ_LATE_S + window_s * 1e-3)
}

/// A fake `nvidia-smi` running `script` (a shell script's body) in `dir`; returns the
/// `PATH` that finds it first.
fn fake_nvidia_smi(dir: &std::path::Path, script: &str) -> String {
    let smi = dir.join("nvidia-smi");
    std::fs::write(&smi, format!("#!/bin/sh\n{script}")).expect("write");
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn gpu_metrics_nvidia_smi_energy_per_token_is_power_times_window_over_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = fake_nvidia_smi(
        dir.path(),
        "printf '0, 300.00, 50, 1000\\n1, 300.00, 70, 3000\\n'\n",
    );
    let server = mock(MockConfig {
        ttft_ms: 50.0,
        ..MockConfig::instant()
    });
    let report = Bench::target(&server.base_url())
        .concurrent(2)
        .max_requests(20)
        .data("prompt_tokens=16,output_tokens=8")
        .outputs("json,csv")
        .arg("--gpu-metrics", "nvidia-smi")
        .arg("--server-metrics-interval", "100ms")
        .run_with_env(&[("PATH", &path)]);
    assert_eq!(report.code(), 0, "{}", report.stderr);
    let r = report.report();
    let b = &r.benchmarks[0];
    let gpu = b.gpu.as_ref().expect("gpu figures");
    assert_eq!(gpu.gpus, 2);
    assert_eq!(gpu.power_mean_w, 600.0);
    assert_eq!(gpu.power_max_w, 600.0);
    assert_eq!(gpu.util_mean_pct, Some(60.0));
    assert_eq!(gpu.memory_max_mib, Some(4000.0));
    // The truth: what the mock sent.
    let tokens = server.stats().tokens_sent as f64;
    let window = b.measured_window.duration_s;
    let want = 600.0 * window / tokens;
    let got = gpu.joules_per_output_token.expect("J/token");
    assert!(
        (got - want).abs() / want < 0.02,
        "J/token {got}, want {want}"
    );
    let per_gpu = gpu.output_tokens_per_s_per_gpu.expect("per GPU");
    assert!((per_gpu - tokens / window / 2.0).abs() / per_gpu < 0.02);
    // And in the CSV.
    let csv = report.csv_first_row();
    assert_eq!(csv.cell("gpu.power_mean_w"), "600");
    assert_eq!(csv.cell("gpu.1.power_mean_w"), "300");
}

#[test]
fn gpu_metrics_from_the_mocks_dcgm_series() {
    let server = mock(MockConfig {
        ttft_ms: 50.0,
        dcgm_gpus: 2,
        dcgm_power_w: 250.0,
        ..MockConfig::instant()
    });
    let url = format!("{}/metrics", server.base_url());
    // 120 requests of 50 ms, 2 at a time: a window of about 3 s.
    let report = Bench::target(&server.base_url())
        .concurrent(2)
        .max_requests(120)
        .data("prompt_tokens=16,output_tokens=8")
        .outputs("json")
        .arg("--gpu-metrics", &url)
        .arg("--server-metrics-interval", "100ms")
        .ok_report();
    let b = &report.benchmarks[0];
    let gpu = b.gpu.as_ref().expect("gpu figures");
    assert_eq!(gpu.gpus, 2);
    assert_eq!(gpu.power_mean_w, 500.0);
    assert_eq!(gpu.util_mean_pct, Some(50.0));
    assert_eq!(gpu.memory_max_mib, Some(1024.0 + 2048.0));
    let tokens = server.stats().tokens_sent as f64;
    let window = b.measured_window.duration_s;
    let got = gpu.joules_per_output_token.expect("J/token");
    assert!(
        energy_close(got * tokens, 500.0, window),
        "J/token {got}: {} J for {tokens} tokens, the mock's 500 W over {window} s",
        got * tokens
    );
    // The mock's counters (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) give the energy: each
    // GPU's is its 250 W over the measured window, the mock's truth.
    use llmsurge_coordinator::gpu::EnergySource;
    assert_eq!(gpu.energy_source, Some(EnergySource::Counter), "{gpu:?}");
    for g in &gpu.per_gpu {
        assert_eq!(g.energy_source, Some(EnergySource::Counter), "{g:?}");
        assert!(
            energy_close(g.energy_j, 250.0, window),
            "GPU {}: {} J, the mock's 250 W over {window} s",
            g.index,
            g.energy_j
        );
    }
}

#[test]
fn gpu_energy_counter_differences_are_the_mocks_energy_over_the_window() {
    // The counter read from the mock's own /metrics before and after the run bounds the
    // energy of the window inside them; the report's is the window's share of it.
    let server = mock(MockConfig {
        ttft_ms: 50.0,
        dcgm_gpus: 1,
        dcgm_power_w: 123.0,
        ..MockConfig::instant()
    });
    let url = format!("{}/metrics", server.base_url());
    let port: u16 = server
        .base_url()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("a port");
    let counter = || -> f64 {
        let text = crate::sweep::http_get(port, "/metrics").expect("the mock's metrics");
        text.lines()
            .find_map(|l| {
                l.strip_prefix("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{")
                    .and_then(|r| r.split_whitespace().last())
                    .and_then(|v| v.parse::<f64>().ok())
            })
            .expect("the energy counter")
    };
    let (before, t0) = (counter(), std::time::Instant::now());
    let run = Bench::target(&server.base_url())
        .concurrent(2)
        .max_requests(120)
        .data("prompt_tokens=16,output_tokens=8")
        .outputs("json,csv")
        .arg("--gpu-metrics", &url)
        .arg("--server-metrics-interval", "100ms")
        .run();
    let (after, elapsed) = (counter(), t0.elapsed().as_secs_f64());
    let report = crate::support::ok_report(&run);
    let b = &report.benchmarks[0];
    let gpu = b.gpu.as_ref().expect("gpu figures");
    // The mock's counter grew at its power between the two reads.
    assert!(
        energy_close((after - before) / 1000.0, 123.0, elapsed),
        "{} J over {elapsed} s",
        (after - before) / 1000.0
    );
    let window = b.measured_window.duration_s;
    assert!(
        energy_close(gpu.energy_j, 123.0, window),
        "{} J, the mock's 123 W over {window} s",
        gpu.energy_j
    );
    assert!(
        gpu.energy_j * 1000.0 <= after - before,
        "within the two reads"
    );
    assert_eq!(run.csv_first_row().cell("gpu.energy_source"), "counter");
}

#[test]
fn gpu_power_utilisation_and_memory_are_charted_over_the_run_sample_by_sample() {
    // Each call of the fake nvidia-smi reports 10 W more on GPU 0 than the call before
    // and logs itself: the report's series must be those calls, in order.
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = dir.path().join("calls");
    let path = fake_nvidia_smi(
        dir.path(),
        &format!(
            "n=$(cat '{calls}' 2>/dev/null | wc -l)\necho x >> '{calls}'\n\
             printf '0, %d.00, 50, 1000\\n1, 300.00, 70, 3000\\n' $((100 + 10 * n))\n",
            calls = calls.display()
        ),
    );
    let server = mock(MockConfig {
        ttft_ms: 50.0,
        ..MockConfig::instant()
    });
    let run = Bench::target(&server.base_url())
        .concurrent(2)
        .max_requests(20)
        .data("prompt_tokens=16,output_tokens=8")
        .outputs("json,html,png")
        .arg("--gpu-metrics", "nvidia-smi")
        .arg("--server-metrics-interval", "100ms")
        .run_with_env(&[("PATH", &path)]);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let called = std::fs::read_to_string(&calls)
        .expect("calls")
        .lines()
        .count();
    let r = run.report();
    let gpu = r.benchmarks[0].gpu.as_ref().expect("gpu figures");
    let power: Vec<f64> = gpu.series.iter().map(|p| p.power_w).collect();
    assert!(power.len() >= 2, "{power:?}");
    // The last sample is the last call; each sample is the call after the one before.
    let last = 400.0 + 10.0 * (called as f64 - 1.0);
    assert_eq!(power.last(), Some(&last), "{called} calls: {power:?}");
    assert!(power.windows(2).all(|w| w[1] - w[0] == 10.0), "{power:?}");
    assert!(gpu.series.windows(2).all(|w| w[0].time < w[1].time));
    for p in &gpu.series {
        assert_eq!((p.util_pct, p.memory_mib), (Some(60.0), Some(4000.0)));
    }
    // Both charts, in the page and as images.
    let html = std::fs::read_to_string(run.dir.path().join("benchmarks.html")).expect("html");
    assert!(html.contains("id=\"charts-gpu\""));
    for id in ["gpu-power", "gpu-utilisation-memory"] {
        assert!(
            html.contains(&format!("\"id\":\"{id}\"")),
            "{id} in the page"
        );
        let png = run.dir.path().join(format!("{id}.png"));
        assert!(png.exists(), "{}", png.display());
    }
}
