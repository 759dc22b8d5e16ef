//! The Pareto front of output tokens/s per user against output tokens/s in total (or per
//! GPU): the benchmarks no other beats on both at once. Per user is 1 / TPOT (its mean,
//! or its p50), what one stream sees; in total is the server's output rate, what the
//! operator pays for. vLLM's benchmark tools draw the same trade-off.

use super::{Axis, Chart, Mark, Series, color};
use llmsurge_coordinator::BenchmarkResult;

/// Which TPOT figure gives the tokens/s per user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PerUser {
    /// 1 / the TPOT mean.
    #[default]
    Mean,
    /// 1 / the TPOT p50.
    P50,
}

/// One benchmark as a point of the trade-off.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// What tells it apart from the other points (rate or concurrency, file, server
    /// settings).
    pub label: String,
    /// Output tokens/s in total, or per GPU.
    pub total: f64,
    /// Output tokens/s one user sees: 1000 / TPOT in ms.
    pub per_user: f64,
}

/// The indexes of the points no other point dominates (at least as good on both axes and
/// better on one), by increasing `x`. Duplicates do not dominate each other: both stay.
pub fn front(points: &[(f64, f64)]) -> Vec<usize> {
    let dominates =
        |q: (f64, f64), p: (f64, f64)| q.0 >= p.0 && q.1 >= p.1 && (q.0 > p.0 || q.1 > p.1);
    let mut out: Vec<usize> = (0..points.len())
        .filter(|&i| points[i].0.is_finite() && points[i].1.is_finite())
        .filter(|&i| {
            !points
                .iter()
                .filter(|q| q.0.is_finite() && q.1.is_finite())
                .any(|&q| dominates(q, points[i]))
        })
        .collect();
    out.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(a.cmp(&b)));
    out
}

/// A benchmark's point, when it measured TPOT and output throughput. `gpus` divides the
/// total.
pub fn point(
    b: &BenchmarkResult,
    label: String,
    per_user: PerUser,
    gpus: Option<u32>,
) -> Option<Point> {
    let tpot = &b.metrics.get("tpot")?.successful;
    if tpot.count == 0 {
        return None;
    }
    let ms = match per_user {
        PerUser::Mean => tpot.mean,
        PerUser::P50 => tpot.percentiles.p50,
    };
    let total = b.throughput.output_tokens_per_s? / f64::from(gpus.unwrap_or(1).max(1));
    (ms > 0.0 && ms.is_finite() && total.is_finite()).then(|| Point {
        label,
        total,
        per_user: 1000.0 / ms,
    })
}

/// The chart: every point, the front joined by a line, each front point labelled.
pub fn chart(points: &[Point], per_user: PerUser, gpus: Option<u32>) -> Chart {
    let mut c = Chart::new(
        "pareto-front",
        "charts-throughput",
        "Pareto front: output tokens/s per user vs in total",
        Axis::new(
            if gpus.is_some() {
                "output throughput per GPU"
            } else {
                "output throughput"
            },
            "tokens/s",
        ),
        Axis::new(
            match per_user {
                PerUser::Mean => "per user (1 / TPOT mean)",
                PerUser::P50 => "per user (1 / TPOT p50)",
            },
            "tokens/s",
        ),
    );
    c.y_data_only = true;
    c.legend_lower = true;
    let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.total, p.per_user)).collect();
    let on = front(&xy);
    let mut all = Series::new(
        "benchmarks",
        color(7),
        xy.iter().map(|&(x, y)| (x, Some(y))).collect(),
    );
    all.line = false;
    all.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    c.series.push(all);
    c.series.push(Series::new(
        "Pareto front",
        color(1),
        on.iter().map(|&i| (xy[i].0, Some(xy[i].1))).collect(),
    ));
    c.marks = on
        .iter()
        .map(|&i| Mark {
            x: xy[i].0,
            y: xy[i].1,
            label: points[i].label.clone(),
        })
        .collect();
    c.note_narrow_range();
    c.finish("No benchmark measured both TPOT and output throughput.")
}

/// The table in Markdown: one row per point, those on the front marked.
pub fn markdown(points: &[Point], per_user: PerUser, gpus: Option<u32>) -> String {
    let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.total, p.per_user)).collect();
    let on = front(&xy);
    let total = if gpus.is_some() {
        "output tok/s per GPU"
    } else {
        "output tok/s"
    };
    let user = match per_user {
        PerUser::Mean => "tok/s per user (1 / TPOT mean)",
        PerUser::P50 => "tok/s per user (1 / TPOT p50)",
    };
    let mut md = format!(
        "## Pareto front\n\n| point | {total} | {user} | on the front |\n| --- | ---: | ---: | --- |\n"
    );
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| xy[a].0.total_cmp(&xy[b].0));
    for i in order {
        let p = &points[i];
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            p.label.replace('|', "\\|"),
            super::super::num(p.total),
            super::super::num(p.per_user),
            if on.contains(&i) { "yes" } else { "" }
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_is_exactly_the_non_dominated_points() {
        let pts = [
            (1.0, 10.0),       // 0: front (best per user)
            (2.0, 8.0),        // 1: front
            (2.0, 8.0),        // 2: a duplicate of 1: neither dominates the other
            (2.0, 7.0),        // 3: same total as 1, worse per user: dominated
            (3.0, 5.0),        // 4: front
            (1.0, 9.0),        // 5: same total as 0, worse: dominated
            (3.0, 5.0),        // 6: duplicate of 4
            (2.5, 5.0),        // 7: same per user as 4, less total: dominated
            (4.0, 1.0),        // 8: front (best total)
            (0.5, 0.5),        // 9: dominated by all
            (f64::NAN, 100.0), // 10: not a point
        ];
        assert_eq!(front(&pts), vec![0, 1, 2, 4, 6, 8]);
        assert_eq!(front(&[]), Vec::<usize>::new());
        assert_eq!(front(&[(1.0, 1.0)]), vec![0]);
    }
}
