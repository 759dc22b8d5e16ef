//! The books of an agent trace's graph under way (issue 24 §1): which calls are due, and
//! when. A call is due when every call it depends on ended, plus its recorded gap; the
//! request loop sends it then, as it sends a session's turn after its think time (one
//! loop: a linear session is the graph where each turn depends on the one before).

use crate::source::Turn;
use llmsurge_proto::{GraphStep, MonoNanos};
use std::time::Duration;

/// A call that became due: its turn index, its instant, and what it waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DueCall {
    /// The turn.
    pub turn: usize,
    /// When it is due.
    pub due: MonoNanos,
    /// Its last dependency to end, and its gap (for its record).
    pub step: GraphStep,
}

/// One graph's dependencies and what has ended so far.
#[derive(Debug)]
pub struct GraphRun {
    deps: Vec<Vec<u32>>,
    gaps: Vec<u64>,
    /// For each call, the calls that depend on it.
    dependents: Vec<Vec<usize>>,
    /// Dependencies not yet ended, per call.
    waiting: Vec<usize>,
    ends: Vec<Option<MonoNanos>>,
    start: MonoNanos,
}

impl GraphRun {
    /// The books of `turns` (each with [`Turn::after`]) for a trace started at `start`;
    /// a dependency that names no turn of the graph is ignored (the source checks them).
    pub fn new(turns: &[Turn], start: MonoNanos) -> Self {
        let n = turns.len();
        let deps: Vec<Vec<u32>> = turns
            .iter()
            .map(|t| {
                let mut d = t.after.clone().unwrap_or_default();
                d.retain(|&k| (k as usize) < n);
                d.sort_unstable();
                d.dedup();
                d
            })
            .collect();
        let mut dependents = vec![Vec::new(); n];
        for (i, d) in deps.iter().enumerate() {
            for &k in d {
                dependents[k as usize].push(i);
            }
        }
        Self {
            waiting: deps.iter().map(Vec::len).collect(),
            gaps: turns.iter().map(|t| t.think_ns).collect(),
            deps,
            dependents,
            ends: vec![None; n],
            start,
        }
    }

    /// The calls that depend on none: due at the trace's start plus their gaps.
    pub fn roots(&self) -> Vec<DueCall> {
        (0..self.deps.len())
            .filter(|&i| self.deps[i].is_empty())
            .map(|i| self.due(i))
            .collect()
    }

    /// Marks `turn` ended at `end`; returns the calls that became due by it.
    pub fn ended(&mut self, turn: usize, end: MonoNanos) -> Vec<DueCall> {
        let Some(slot) = self.ends.get_mut(turn) else {
            return Vec::new();
        };
        *slot = Some(end);
        let mut ready = Vec::new();
        for &d in &self.dependents[turn] {
            self.waiting[d] = self.waiting[d].saturating_sub(1);
            if self.waiting[d] == 0 {
                ready.push(d);
            }
        }
        ready.into_iter().map(|d| self.due(d)).collect()
    }

    fn due(&self, i: usize) -> DueCall {
        // The last dependency to end (the lowest index among equal ends).
        let last = self.deps[i]
            .iter()
            .filter_map(|&k| self.ends[k as usize].map(|e| (e, k)))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let from = last.map_or(self.start, |(e, _)| e);
        DueCall {
            turn: i,
            due: from + Duration::from_nanos(self.gaps[i]),
            step: GraphStep {
                after: last.map(|(_, k)| k),
                gap_ns: self.gaps[i],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{PreparedRequest, Prompt};

    fn turn(after: &[u32], gap_ms: u64) -> Turn {
        Turn {
            request: PreparedRequest {
                prompt: Prompt::Text(String::new()),
                prompt_tokens: None,
                max_tokens: None,
                model: None,
                user: None,
                session: None,
            },
            think_ns: gap_ms * 1_000_000,
            recorded_reply: None,
            tool_result: None,
            tool_result_tokens: 0,
            after: Some(after.to_vec()),
            parent_session: None,
        }
    }

    #[test]
    fn a_join_is_due_after_its_last_dependency_plus_its_gap() {
        let ms = |n: u64| Duration::from_millis(n);
        let t0 = MonoNanos(1_000_000_000);
        // plan → (a, b) → join
        let turns = [
            turn(&[], 0),
            turn(&[0], 20),
            turn(&[0], 30),
            turn(&[1, 2], 5),
        ];
        let mut g = GraphRun::new(&turns, t0);
        assert_eq!(g.roots().len(), 1);
        assert_eq!(g.roots()[0].due, t0);
        let fan = g.ended(0, t0 + ms(100));
        assert_eq!(
            fan.iter().map(|c| (c.turn, c.due)).collect::<Vec<_>>(),
            [(1, t0 + ms(120)), (2, t0 + ms(130))]
        );
        assert_eq!(fan[0].step.after, Some(0));
        assert!(g.ended(2, t0 + ms(400)).is_empty(), "b alone is not enough");
        let join = g.ended(1, t0 + ms(300));
        assert_eq!(join.len(), 1);
        // b ended last (400 ms): the join waits its gap after that.
        assert_eq!(join[0].due, t0 + ms(405));
        assert_eq!(
            join[0].step,
            GraphStep {
                after: Some(2),
                gap_ns: 5_000_000
            }
        );
    }
}
