//! Auto-disable on the [`MemoryStore`](super::MemoryStore): a try's end
//! recorded for its subscription and, when that disables
//! it, its pending tasks canceled and the notice to its topic's
//! `callback_url` submitted, under the one lock.

use tc_model::State;
use tc_model::store::StoreError;
use tc_model::topic::DISABLED_REASON;
use tc_model::topic::health::{HealthChange, disabled_notice};
use tc_model::{Timestamp, transit};

use super::Tables;

impl Tables {
    /// [`tc_model::store::Topics::subscription_try_ended`].
    pub(super) fn subscription_try_ended(
        &mut self,
        id: &str,
        ok: bool,
        now: Timestamp,
        result_bytes: usize,
    ) -> Result<HealthChange, StoreError> {
        let (topic, sub) = self
            .topics
            .topics
            .values_mut()
            .find_map(|(topic, subs)| Some((&*topic, subs.iter_mut().find(|s| s.id == id)?)))
            .ok_or(StoreError::NotFound)?;
        let change = sub.after_try(ok, now, topic.spec.disable_after);
        if change != HealthChange::Disabled {
            return Ok(change);
        }
        let notice = disabled_notice(topic, sub, now);
        let pending: Vec<i64> = self
            .tasks
            .iter()
            .filter(|(_, t)| {
                t.state == State::Pending && t.topic.as_ref().is_some_and(|l| l.subscription == id)
            })
            .map(|(seq, _)| *seq)
            .collect();
        for seq in pending {
            let task = self.task_mut(seq)?;
            task.state = transit(task.state, State::Canceled)?;
            task.finished_at = Some(now);
            task.updated_at = now;
            task.next_run_at = None;
            task.error = Some(DISABLED_REASON.to_owned());
            self.ended(seq, now, result_bytes)?;
        }
        if let Some(notice) = notice {
            self.submit_one(&notice, now)?;
        }
        Ok(change)
    }
}
