//! Read-only views of the active series, for what the shell derives from them on its own schedule
//! (alerts, the per-namespace loop gauge) without the engine allocating a snapshot per series.

use super::Engine;
use crate::alert::AlertRule;
use crate::key::{KeyId, KeyRef};
use crate::settings::Settings;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// One Ongoing series, borrowed from the engine.
#[derive(Clone, Debug)]
pub struct LoopView<'a> {
    pub id: KeyId,
    pub namespace: &'a str,
    pub key: KeyRef<'a>,
    pub note: &'a str,
    pub count: u64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    /// When its latest occurrence arrived, on the operator's clock (what finishing goes by).
    pub seen: DateTime<Utc>,
    /// The settings of the policy that governs it.
    pub settings: &'a Settings,
}

impl LoopView<'_> {
    /// The policy's alert rule, if it has one and it selects this loop.
    pub fn alert(&self) -> Option<&Arc<AlertRule>> {
        self.settings
            .alert
            .as_ref()
            .filter(|rule| rule.selects(&self.key, self.count, self.first, self.last))
    }
}

impl Engine {
    /// Visits every Ongoing series. O(active series), no allocation.
    pub fn for_each_loop(&self, mut f: impl FnMut(LoopView<'_>)) {
        for (slot_idx, slot) in self.slots.iter().enumerate() {
            let settings = self.policies.settings(slot_idx);
            for (id, s) in slot.series.iter() {
                let packed = self.keys.get(s.tally.key);
                let name = self.namespaces.name_ref(s.tally.ns);
                f(LoopView {
                    id: *id,
                    namespace: name,
                    key: packed.view(),
                    note: packed.note(),
                    count: s.tally.count,
                    first: s.tally.first(),
                    last: s.tally.last(),
                    seen: s.tally.seen(),
                    settings,
                });
            }
        }
    }

    /// The alert rule of the policy that governs `namespace` now, if it has one: for a series that
    /// has just ended, whose view is gone.
    pub fn alert_rule(&self, namespace: &str) -> Option<&Arc<AlertRule>> {
        let slot = self.namespaces.slot_by_name(namespace)?;
        self.policies.settings(slot).alert.as_ref()
    }
}
