//! Host facts in a real report's metadata (issue 13): what the kernel says, read back.

use crate::support::{mock, ok_report, run};
use llmsurge::mock::MockConfig;

/// The first line of a sysfs file, as the report should carry it (`None` if absent).
fn sysfs(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
        .filter(|l| !l.is_empty())
}

#[test]
fn report_metadata_carries_the_host_facts() {
    let server = mock(MockConfig::instant());
    let finished = run(&[
        "--target",
        &server.base_url(),
        "--profile",
        "synchronous",
        "--max-requests",
        "2",
        "--outputs",
        "json",
    ]);
    let host = ok_report(&finished).metadata.host;
    let release = sysfs("/proc/sys/kernel/osrelease").expect("Linux tells its release");
    assert_eq!(host.kernel.as_deref(), Some(release.as_str()));
    assert!(host.cpus > 0 && !host.cpu.is_empty(), "{host:?}");
    assert_eq!(
        host.cpu_governor,
        sysfs("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    );
    assert_eq!(
        host.clock_source,
        sysfs("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    );
    assert_eq!(
        host.ntp_synchronized,
        llmsurge::clock_sync::ntp_synchronised()
    );
    // Whether a thread of this process may go real-time, asked independently.
    let may = std::thread::spawn(|| {
        let param = nix::libc::sched_param { sched_priority: 1 };
        // SAFETY: a valid sched_param; pid 0 is this throwaway thread.
        unsafe { nix::libc::sched_setscheduler(0, nix::libc::SCHED_FIFO, &raw const param) == 0 }
    })
    .join()
    .expect("probe thread");
    assert_eq!(
        host.realtime_pacer,
        Some(may),
        "the pacer's real-time permission"
    );
    // The run inherits this process's hard limit (it may raise its soft one up to it).
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .expect("getrlimit");
    assert_eq!(host.open_files_hard, Some(hard));
    let soft = host.open_files_soft.expect("soft limit");
    assert!(soft > 0 && soft <= hard, "{soft} > {hard}");
    // The JSON names them as docs/report.md does.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(finished.report_path()).expect("report"))
            .expect("JSON");
    let keys = json["metadata"]["host"]
        .as_object()
        .expect("host object")
        .keys()
        .cloned()
        .collect::<Vec<_>>();
    for key in ["kernel", "open_files_soft", "open_files_hard"] {
        assert!(keys.iter().any(|k| k == key), "{key} in {keys:?}");
    }
}
