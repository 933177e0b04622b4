//! Series whose object has another than its first name: a create met someone else's object at
//! the name (a tenant's Event), so the series moved to its next deterministic name.

use super::{Job, Queue, RENAMED_KEPT, Settled, Target, Verb};
use crate::object;
use std::sync::Arc;

impl Queue {
    /// A renamed series' finish was written: its name is kept for a while (see `renamed`).
    pub(super) fn finished_renamed(&mut self, target: &Arc<Target>) {
        if !self.renamed.contains_key(target) {
            return;
        }
        self.renamed_finished.push_back(target.clone());
        while self.renamed_finished.len() > RENAMED_KEPT {
            if let Some(old) = self.renamed_finished.pop_front()
                && !self.pending.contains_key(&old)
            {
                self.renamed.remove(&old);
            }
        }
    }

    /// Someone else's object holds the name `job` went to: the series' next name, or, past the last,
    /// the write given up.
    pub(super) fn next_name(&mut self, job: &Job) -> Settled {
        if let Some(p) = self.pending.get_mut(&job.target)
            && p.variant < object::MAX_NAME_VARIANT
        {
            p.variant += 1;
            p.verb = Verb::Create;
            self.renamed.insert(job.target.clone(), p.variant);
            return Settled::Renamed { variant: p.variant };
        }
        let p = self.remove(&job.target);
        self.renamed.remove(&job.target);
        Settled::Rejected {
            why: format!(
                "every name of the series (the first and {} more) is held by an Event that is not its own",
                object::MAX_NAME_VARIANT
            ),
            intent: Box::new(p.map_or_else(|| job.intent.clone(), |p| p.intent)),
        }
    }
}
