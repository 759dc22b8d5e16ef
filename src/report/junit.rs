//! JUnit XML for CI systems: one testcase per SLO check per benchmark, or per compared
//! metric with a tolerance. Shape: `testsuites > testsuite > testcase > failure|skipped`.

use crate::compare::{Comparison, Verdict};
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::profiles::CapacityOutcome;
use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesText, Event};

/// One test case.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Groups cases in CI views, e.g. `llmsurge.slo.constant@50`.
    pub classname: String,
    /// The check, e.g. `ttft_p99<=500ms`.
    pub name: String,
    /// Why it failed.
    pub failure: Option<String>,
    /// Why it was not judged.
    pub skipped: Option<String>,
    /// What was measured.
    pub output: String,
}

/// One test suite (a benchmark, or a matched pair of benchmarks).
#[derive(Clone, Debug, PartialEq)]
pub struct Suite {
    /// Its name.
    pub name: String,
    /// Its cases.
    pub cases: Vec<Case>,
}

fn fmt(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.4}"))
}

/// Suites of the SLO verdicts of a run (benchmarks without a verdict are left out).
pub fn slo_suites(benchmarks: &[BenchmarkResult]) -> Vec<Suite> {
    benchmarks
        .iter()
        .filter_map(|b| {
            let verdict = b.slo.as_ref()?;
            let label = b.strategy.to_string();
            let cases = verdict
                .checks
                .iter()
                .map(|c| {
                    let mut measured = format!("measured {} against {}", fmt(c.measured), c.name);
                    if let Some(confidence) = c.confidence {
                        let side = |b: Option<f64>| b.map_or("?".into(), |v| fmt(Some(v)));
                        measured = format!(
                            "{measured} ({}% bounds {} to {})",
                            (confidence * 1e4).round() / 1e2,
                            side(c.lower),
                            side(c.upper)
                        );
                    }
                    if let Some(reason) = &c.reason {
                        measured = format!("{measured}: {reason}");
                    }
                    Case {
                        classname: format!("llmsurge.slo.{label}"),
                        name: c.name.clone(),
                        // An inconclusive check is a failure here, not `skipped`: CI test
                        // views (Jenkins, GitLab, GitHub reporters) count skipped cases as
                        // green, and a gate that could not decide must not look passed.
                        // Its message starts with INCONCLUSIVE and says about how many
                        // more requests would decide; the exit code (5) tells it apart.
                        failure: (!c.passed).then(|| format!("{}: {measured}", c.label())),
                        skipped: None,
                        output: measured,
                    }
                })
                .collect();
            Some(Suite {
                name: format!("slo {label}"),
                cases,
            })
        })
        .collect()
}

/// The suite of a capacity search with `--slo-tier`: one case per tier, a failure when
/// the tier found no answer (the gate behind exit 3 and 5), else its answer and binding
/// objective. Empty without tiers.
pub fn tier_suites(capacity: Option<&CapacityOutcome>) -> Vec<Suite> {
    let Some(c) = capacity.filter(|c| !c.tiers.is_empty()) else {
        return Vec::new();
    };
    let cases = c
        .tiers
        .iter()
        .map(|t| {
            let objectives = t.objectives.join(",");
            let output = match (t.value, &t.binding) {
                (Some(v), Some(b)) => format!(
                    "{} [{objectives}], bound by {b}: {}",
                    c.variable.show(v),
                    t.conclusion
                ),
                (Some(v), None) => {
                    format!("{} [{objectives}]: {}", c.variable.show(v), t.conclusion)
                }
                (None, _) => format!("none [{objectives}]: {}", t.conclusion),
            };
            Case {
                classname: "llmsurge.capacity.tier".into(),
                name: t.name.clone(),
                failure: t
                    .value
                    .is_none()
                    .then(|| format!("no {} count met the tier: {output}", c.variable.unit())),
                skipped: None,
                output,
            }
        })
        .collect();
    vec![Suite {
        name: "capacity per SLO tier".into(),
        cases,
    }]
}

/// Suites of a comparison: one case per metric that has a tolerance, and one per
/// benchmark without a partner (a failure unless `--allow-missing`).
pub fn comparison_suites(c: &Comparison) -> Vec<Suite> {
    let missing = (c.unmatched() > 0).then(|| Suite {
        name: "compare benchmarks without a partner".into(),
        cases: c
            .missing_lines()
            .into_iter()
            .map(|line| Case {
                classname: "llmsurge.compare.pairing".into(),
                name: line.clone(),
                failure: c.missing_fails().then(|| line.clone()),
                skipped: c.allow_missing.then(|| "allowed by --allow-missing".into()),
                output: line,
            })
            .collect(),
    });
    c.pairs
        .iter()
        .map(|p| Suite {
            name: format!("compare {}", p.label),
            cases: p
                .changes
                .iter()
                .filter(|m| m.tolerance.is_some())
                .map(|m| {
                    let unit = if m.unit == crate::compare::tolerance::ChangeUnit::Percent { "%" } else { "pp" };
                    let ci = m.ci.map_or(String::new(), |(lo, hi)| format!(", {}% interval [{lo:+.2}, {hi:+.2}]{unit}", llmsurge_coordinator::slo::confidence_percent(c.confidence)));
                    let allowed = m.tolerance.map_or(0.0, |t| t.allowed);
                    let output = format!(
                        "baseline {} current {} change {}{unit} (allowed {allowed}{unit} worse{ci}); samples {} vs {}",
                        fmt(m.baseline),
                        fmt(m.current),
                        m.change.map_or("n/a".into(), |x| format!("{x:+.2}")),
                        m.samples.0,
                        m.samples.1
                    );
                    Case {
                        classname: format!("llmsurge.compare.{}", p.label),
                        name: m.metric.clone(),
                        failure: (m.verdict == Verdict::Regressed).then(|| output.clone()),
                        skipped: match m.verdict {
                            Verdict::Missing => Some("no value on one side".into()),
                            _ => None,
                        },
                        output,
                    }
                })
                .collect(),
        })
        .chain(missing)
        .chain((!c.server.failing().is_empty()).then(|| Suite {
            name: "compare server".into(),
            cases: c
                .server
                .failure_lines()
                .into_iter()
                .map(|line| Case {
                    classname: "llmsurge.compare.server".into(),
                    name: line.clone(),
                    failure: Some(line.clone()),
                    skipped: None,
                    output: line,
                })
                .collect(),
        }))
        .collect()
}

/// Renders suites as a JUnit XML document.
pub fn render(suites: &[Suite]) -> std::io::Result<String> {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let total: usize = suites.iter().map(|s| s.cases.len()).sum();
    let failures: usize = suites
        .iter()
        .flat_map(|s| &s.cases)
        .filter(|c| c.failure.is_some())
        .count();
    w.create_element("testsuites")
        .with_attribute(("name", "llmsurge"))
        .with_attribute(("tests", total.to_string().as_str()))
        .with_attribute(("failures", failures.to_string().as_str()))
        .write_inner_content(|w| {
            for s in suites {
                let f = s.cases.iter().filter(|c| c.failure.is_some()).count();
                let skipped = s.cases.iter().filter(|c| c.skipped.is_some()).count();
                w.create_element("testsuite")
                    .with_attribute(("name", s.name.as_str()))
                    .with_attribute(("tests", s.cases.len().to_string().as_str()))
                    .with_attribute(("failures", f.to_string().as_str()))
                    .with_attribute(("errors", "0"))
                    .with_attribute(("skipped", skipped.to_string().as_str()))
                    .write_inner_content(|w| {
                        for c in &s.cases {
                            w.create_element("testcase")
                                .with_attribute(("classname", c.classname.as_str()))
                                .with_attribute(("name", c.name.as_str()))
                                .with_attribute(("time", "0"))
                                .write_inner_content(|w| {
                                    if let Some(message) = &c.failure {
                                        w.create_element("failure")
                                            .with_attribute(("message", message.as_str()))
                                            .with_attribute(("type", "threshold"))
                                            .write_empty()?;
                                    }
                                    if let Some(message) = &c.skipped {
                                        w.create_element("skipped")
                                            .with_attribute(("message", message.as_str()))
                                            .write_empty()?;
                                    }
                                    w.create_element("system-out")
                                        .write_text_content(BytesText::new(&c.output))?;
                                    Ok(())
                                })?;
                        }
                        Ok(())
                    })?;
            }
            Ok(())
        })?;
    String::from_utf8(w.into_inner()).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_escape_and_count() {
        let suites = vec![Suite {
            name: "slo constant@5".into(),
            cases: vec![
                Case {
                    classname: "llmsurge.slo.constant@5".into(),
                    name: "ttft_p99<=5ms".into(),
                    failure: Some("measured 9 > 5 & \"late\"".into()),
                    skipped: None,
                    output: "x".into(),
                },
                Case {
                    classname: "c".into(),
                    name: "error_rate<=1%".into(),
                    failure: None,
                    skipped: None,
                    output: "y".into(),
                },
            ],
        }];
        let xml = render(&suites).expect("render");
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
        assert!(
            xml.contains("<testsuites name=\"llmsurge\" tests=\"2\" failures=\"1\">"),
            "{xml}"
        );
        assert!(xml.contains("name=\"ttft_p99&lt;=5ms\""), "{xml}");
        assert!(xml.contains("&amp; &quot;late&quot;"), "{xml}");
    }
}
