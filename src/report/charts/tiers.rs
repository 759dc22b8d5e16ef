//! A capacity search with `--slo-tier`: each tier's answer (the most users, or the
//! highest rate, meeting it) beside the value that failed above it, one column per tier.

use super::{Axis, Chart, Mark, Series, color};
use crate::report::json::Report;

/// The chart of users (or rate) against each tier; none without tiers.
pub fn charts(report: &Report) -> Vec<Chart> {
    let Some(c) = report.capacity.as_ref().filter(|c| !c.tiers.is_empty()) else {
        return Vec::new();
    };
    let unit = c.variable.unit();
    // The axis names the quantity and its unit once: "concurrent (users)", "request rate (req/s)".
    let (what, quantity) = match unit {
        "users" => ("concurrent users", "concurrent"),
        "streams" => ("concurrent streams", "concurrent"),
        _ => ("request rate", "request rate"),
    };
    let mut chart = Chart::new(
        "users-per-tier",
        "charts-capacity",
        &format!("Most {what} meeting each SLO tier"),
        Axis::new("SLO tier", ""),
        Axis::new(quantity, unit),
    );
    chart.x_labels = Some(c.tiers.iter().map(|t| t.name.clone()).collect());
    let points = |pick: fn(&llmsurge_coordinator::profiles::TierOutcome) -> Option<f64>| {
        c.tiers
            .iter()
            .enumerate()
            .map(|(i, t)| (i as f64, pick(t).filter(|v| v.is_finite())))
            .collect()
    };
    let mut met = Series::new("met every objective", color(2), points(|t| t.value));
    met.line = false;
    let mut failed = Series::new(
        "failed (the boundary above)",
        color(1),
        points(|t| t.bracket.1),
    );
    failed.line = false;
    failed.dashed = true;
    chart.series = vec![met, failed];
    // What bound each answer, beside the count where it failed.
    chart.marks = c
        .tiers
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            Some(Mark {
                x: i as f64,
                y: t.bracket.1.filter(|v| v.is_finite())?,
                label: format!("bound by {}", t.binding.as_deref()?),
            })
        })
        .collect();
    vec![chart.finish("No tier found a value that met its objectives.")]
}
