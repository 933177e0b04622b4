//! Series whose object has another than its first name: a create met someone else's object at
//! the name (a tenant's Event), so the series moved to its next deterministic name. So does a
//! series whose object vanished (its TTL, deleted) and whose name a tenant then took: the update's
//! own test of the series' labels is refused (422), the object is read, and it is someone else's.

use super::{Answer, Job, Next, Pending, Queue, RENAMED_KEPT, Settled, Target, Verb, next};
use crate::object;
use event_series_core::intent::WriteKind;
use std::sync::Arc;

impl Queue {
    /// `target`'s write landed with nothing newer pending; a finish also ends what is kept of the
    /// series' object (its name, if renamed, for a while; its version at once).
    pub(super) fn written(&mut self, target: &Arc<Target>) -> Settled {
        if let Some(p) = self.remove(target)
            && matches!(p.intent.kind, WriteKind::Finish(_))
        {
            self.finished_renamed(target);
            self.versions.forget(target);
        }
        Settled::Done
    }

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

/// What `answer` to a `verb` leads to for `p`: as [`next`] says, except that an update refused with
/// 422 is followed by a read of the object (someone else's: the next name; the series' own: the
/// refusal stands, an invalid value is not retried forever).
pub(super) fn step(p: &mut Pending, verb: Verb, answer: &Answer) -> Next {
    let step = next(verb, answer);
    match (verb, answer, step) {
        (
            Verb::Patch,
            Answer::Status {
                code: 422, message, ..
            },
            _,
        ) => {
            p.refused = Some(format!("HTTP 422: {message}"));
            Next::Then(Verb::Verify)
        }
        (Verb::Verify, _, Next::Then(Verb::Patch)) => match p.refused.take() {
            Some(why) => Next::Reject(why),
            None => Next::Then(Verb::Patch),
        },
        (verb, _, step) => {
            // A read that must be retried still answers for the refusal.
            if !(verb == Verb::Verify && matches!(step, Next::Retry { .. })) {
                p.refused = None;
            }
            step
        }
    }
}
