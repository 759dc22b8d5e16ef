//! The LoRA traffic split (`--lora`): a wrapper around any request source that names a
//! model in each request, picked by weight.
//!
//! The pick for slot `i` comes from a stream seeded by (run seed, `lora`, `i`), like every
//! other random choice, so the same seed gives every slot the same model whatever
//! `--workers` is, and the pick never depends on which prompt the inner source made.

use llmsurge_proto::seed::derive_seed;
use llmsurge_proto::{LoraModel, LoraSpec};
use llmsurge_worker::{PreparedRequest, RequestSource};
use std::sync::Arc;

/// How far the weights may add up from 1 (a split written as thirds, `0.33` each, is
/// meant as an even one). Within it the weights are normalised; beyond it, an error.
pub const WEIGHT_SUM_TOLERANCE: f64 = 0.01;

/// Name of the random stream the picks are drawn from.
const STREAM: &str = "lora";

/// Parses `--lora`: `name=weight,...` (weights positive, adding up to 1 within
/// [`WEIGHT_SUM_TOLERANCE`]) or `name,name,...` (an even split). Errors are one line,
/// without the flag name (the caller adds it).
pub fn parse(raw: &str) -> Result<LoraSpec, String> {
    let items: Vec<&str> = raw.split(',').map(str::trim).collect();
    if items.iter().all(|i| i.is_empty()) {
        return Err(
            "expects model names, e.g. \"adapter1=0.7,adapter2=0.3\" or \"adapter1,adapter2\""
                .into(),
        );
    }
    let weighted = items.iter().filter(|i| i.contains('=')).count();
    if weighted != 0 && weighted != items.len() {
        return Err(format!(
            "{raw:?}: give a weight to every model or to none (an even split)"
        ));
    }
    let mut models: Vec<LoraModel> = Vec::with_capacity(items.len());
    for item in &items {
        let (name, weight) = match item.split_once('=') {
            Some((name, w)) => {
                let w = w.trim();
                let weight: f64 = w
                    .parse()
                    .map_err(|_| format!("{item:?}: the weight {w:?} is not a number"))?;
                if !(weight.is_finite() && weight > 0.0) {
                    return Err(format!("{item:?}: weights must be positive numbers"));
                }
                (name.trim(), weight)
            }
            None => (*item, 1.0 / items.len() as f64),
        };
        if name.is_empty() {
            return Err(format!("{raw:?}: a model name is empty"));
        }
        if models.iter().any(|m| m.name == name) {
            return Err(format!("model {name:?} is given twice"));
        }
        models.push(LoraModel {
            name: name.to_string(),
            weight,
        });
    }
    if models.len() > LoraSpec::MAX_MODELS {
        return Err(format!(
            "{} models; at most {} are supported",
            models.len(),
            LoraSpec::MAX_MODELS
        ));
    }
    let sum: f64 = models.iter().map(|m| m.weight).sum();
    // The epsilon keeps a sum of exactly 0.99 or 1.01 inside despite binary rounding.
    if (sum - 1.0).abs() > WEIGHT_SUM_TOLERANCE + 1e-9 {
        return Err(format!(
            "the weights add up to {sum}, not 1 (e.g. \"a=0.7,b=0.3\", or names alone for an even split)"
        ));
    }
    for m in &mut models {
        m.weight /= sum;
    }
    Ok(LoraSpec { models })
}

/// Picks a model per slot by weight; shared by the source and its tests.
#[derive(Clone, Debug)]
pub struct LoraPicker {
    names: Vec<Arc<str>>,
    /// Upper ends of each model's interval of [0, 1), the last forced to 1.
    cumulative: Vec<f64>,
    seed: u64,
}

impl LoraPicker {
    /// A picker for `spec`, drawing from the run seed's `lora` stream.
    pub fn new(spec: &LoraSpec, seed: u64) -> Self {
        let mut acc = 0.0;
        let mut cumulative: Vec<f64> = spec
            .models
            .iter()
            .map(|m| {
                acc += m.weight;
                acc
            })
            .collect();
        // Rounding must never leave a sliver of [0, 1) that no model covers.
        if let Some(last) = cumulative.last_mut() {
            *last = 1.0;
        }
        Self {
            names: spec
                .models
                .iter()
                .map(|m| Arc::from(m.name.as_str()))
                .collect(),
            cumulative,
            seed,
        }
    }

    /// The index of the model of `slot`.
    pub fn index(&self, slot: u64) -> usize {
        // 53 random bits: a uniform double in [0, 1).
        let u = (derive_seed(self.seed, STREAM, slot) >> 11) as f64 / (1u64 << 53) as f64;
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.names.len().saturating_sub(1))
    }

    /// The model name of `slot`.
    pub fn pick(&self, slot: u64) -> Option<&Arc<str>> {
        self.names.get(self.index(slot))
    }
}

/// A request source whose requests each name a model of the split.
pub struct LoraSource {
    inner: Box<dyn RequestSource>,
    picker: LoraPicker,
}

impl std::fmt::Debug for LoraSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoraSource")
            .field("picker", &self.picker)
            .finish_non_exhaustive()
    }
}

impl LoraSource {
    /// Wraps `inner`: its requests that name no model get the slot's pick.
    pub fn new(inner: Box<dyn RequestSource>, spec: &LoraSpec, seed: u64) -> Self {
        Self {
            inner,
            picker: LoraPicker::new(spec, seed),
        }
    }
}

impl RequestSource for LoraSource {
    fn request(&mut self, slot: u64) -> Result<Option<PreparedRequest>, String> {
        let mut req = self.inner.request(slot)?;
        if let Some(r) = &mut req
            && r.model.is_none()
        {
            // A source that names its own model (a trace's column, say) keeps it.
            r.model = self.picker.pick(slot).cloned();
        }
        Ok(req)
    }

    fn offset_ns(&self, slot: u64) -> Option<u64> {
        // A replayed trace keeps its instants under a split.
        self.inner.offset_ns(slot)
    }

    fn has_sessions(&self) -> bool {
        self.inner.has_sessions()
    }

    fn session(&mut self, id: u64) -> Result<Option<llmsurge_worker::SessionPlan>, String> {
        let mut plan = self.inner.session(id)?;
        if let Some(plan) = &mut plan {
            // A session talks to one model: picked per session, whatever the worker.
            let model = self.picker.pick(id).cloned();
            for turn in &mut plan.turns {
                if turn.request.model.is_none() {
                    turn.request.model.clone_from(&model);
                }
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(spec: &LoraSpec) -> Vec<(String, f64)> {
        spec.models
            .iter()
            .map(|m| (m.name.clone(), (m.weight * 1000.0).round() / 1000.0))
            .collect()
    }

    #[test]
    fn weighted_and_even_splits_parse() {
        let s = parse("a=0.5, b=0.3,c=0.2").expect("weighted");
        assert_eq!(
            weights(&s),
            vec![("a".into(), 0.5), ("b".into(), 0.3), ("c".into(), 0.2)]
        );
        let s = parse("x,y").expect("even");
        assert_eq!(weights(&s), vec![("x".into(), 0.5), ("y".into(), 0.5)]);
        // Thirds written to two places are within the tolerance, and normalised.
        let s = parse("a=0.33,b=0.33,c=0.33").expect("thirds");
        assert!((s.models.iter().map(|m| m.weight).sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(parse("solo").expect("one").models.len(), 1);
    }

    #[test]
    fn bad_splits_are_one_line_errors() {
        for bad in [
            "",
            " , ",
            "a=0.5,b",
            "a=0.5,b=0.6",
            "a=0,b=1",
            "a=-0.5,b=1.5",
            "a=x,b=1",
            "a=NaN",
            "a=inf",
            "=1",
            "a,a",
            "a,,b",
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(!e.contains('\n'), "{bad:?}: {e}");
        }
    }

    /// A source with its own schedule, as a trace has.
    struct Timed;

    impl RequestSource for Timed {
        fn request(&mut self, _slot: u64) -> Result<Option<PreparedRequest>, String> {
            Ok(Some(PreparedRequest {
                prompt: llmsurge_worker::Prompt::Text("x".into()),
                prompt_tokens: Some(1),
                max_tokens: Some(1),
                model: None,
                user: None,
                session: None,
            }))
        }

        fn offset_ns(&self, slot: u64) -> Option<u64> {
            Some(slot * 1_000)
        }
    }

    #[test]
    fn a_split_keeps_the_sources_schedule_and_names_a_model() {
        let spec = parse("a,b").expect("spec");
        let mut s = LoraSource::new(Box::new(Timed), &spec, 1);
        assert_eq!(s.offset_ns(3), Some(3_000));
        let req = s.request(3).expect("ok").expect("some");
        assert!(matches!(req.model.as_deref(), Some("a" | "b")), "{req:?}");
    }

    #[test]
    fn picks_follow_the_weights_and_the_slot_alone() {
        let spec = parse("a=0.6,b=0.3,c=0.1").expect("spec");
        let p = LoraPicker::new(&spec, 7);
        let n = 100_000u64;
        let mut counts = [0u64; 3];
        for slot in 0..n {
            counts[p.index(slot)] += 1;
        }
        for (c, w) in counts.iter().zip([0.6, 0.3, 0.1]) {
            let share = *c as f64 / n as f64;
            assert!((share - w).abs() < 0.01, "{counts:?}");
        }
        // The same (seed, slot) gives the same pick, in any order of asking.
        let again = LoraPicker::new(&spec, 7);
        for slot in (0..1000).rev() {
            assert_eq!(p.index(slot), again.index(slot));
        }
        // Another seed gives another sequence.
        let other = LoraPicker::new(&spec, 8);
        assert!((0..1000).any(|s| p.index(s) != other.index(s)));
    }
}
