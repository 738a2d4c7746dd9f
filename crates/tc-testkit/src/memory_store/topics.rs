//! Topics on the [`MemoryStore`](super::MemoryStore): the
//! plainest reading of the port's topic methods, on the same tables as its
//! tasks, so that a publish is as atomic as any of its writes (one lock).

use std::collections::BTreeMap;

use tc_model::signing::SigningSecrets;
use tc_model::store::{StoreError, Submitted};
use tc_model::topic::event::{Event, NewEvent, Published};
use tc_model::topic::{
    Delivery, MAX_REPLAY, MAX_SUBSCRIPTIONS, Subscription, SubscriptionSpec, SubscriptionUpdate,
    Topic, TopicRef, TopicSpec,
};
use tc_model::{NewTask, Timestamp};

use super::{Tables, key_of};

/// A stored event and its deliveries: (subscription, task id, replay n).
#[derive(Clone)]
pub(super) struct StoredEvent {
    event: Event,
    made: Vec<(String, tc_model::TaskId, u32)>,
}

/// The topic tables: topics with their subscriptions (oldest first) and
/// events (in publish order).
#[derive(Default)]
pub(super) struct Topics {
    pub(super) topics: BTreeMap<TopicRef, (Topic, Vec<Subscription>)>,
    events: Vec<StoredEvent>,
}

impl Tables {
    fn topic_entry(
        &mut self,
        at: &TopicRef,
    ) -> Result<&mut (Topic, Vec<Subscription>), StoreError> {
        self.topics.topics.get_mut(at).ok_or(StoreError::NotFound)
    }

    pub(super) fn put_topic(
        &mut self,
        at: TopicRef,
        spec: TopicSpec,
        now: Timestamp,
    ) -> (Topic, bool) {
        if let Some((topic, _)) = self.topics.topics.get_mut(&at) {
            topic.spec = spec;
            topic.updated_at = now;
            return (topic.clone(), false);
        }
        let topic = Topic {
            at: at.clone(),
            spec,
            subscriptions: 0,
            created_at: now,
            updated_at: now,
        };
        self.topics.topics.insert(at, (topic.clone(), Vec::new()));
        (topic, true)
    }

    pub(super) fn topics_of(&self, tenant: Option<&str>) -> Vec<Topic> {
        self.topics
            .topics
            .values()
            .filter(|(t, _)| t.at.tenant.as_deref() == tenant)
            .map(|(t, subs)| counted(t, subs))
            .collect()
    }

    pub(super) fn topic(&self, at: &TopicRef) -> Result<Topic, StoreError> {
        let (topic, subs) = self.topics.topics.get(at).ok_or(StoreError::NotFound)?;
        Ok(counted(topic, subs))
    }

    pub(super) fn delete_topic(&mut self, at: &TopicRef) -> Result<(), StoreError> {
        if !self.topic_entry(at)?.1.is_empty() {
            return Err(StoreError::NotEmpty);
        }
        self.topics.topics.remove(at);
        self.topics.events.retain(|e| e.event.topic != *at);
        Ok(())
    }

    pub(super) fn create_subscription(
        &mut self,
        at: TopicRef,
        id: String,
        spec: SubscriptionSpec,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        // An id is unique across every topic, as the SQL stores' key.
        let taken = self
            .topics
            .topics
            .values()
            .any(|(_, subs)| subs.iter().any(|s| s.id == id));
        let (_, subs) = self.topic_entry(&at)?;
        if subs.len() >= MAX_SUBSCRIPTIONS {
            return Err(StoreError::NotEmpty);
        }
        if taken {
            return Err(StoreError::Exists);
        }
        let sub = Subscription::created(id, at, spec, now);
        subs.push(sub.clone());
        Ok(sub)
    }

    pub(super) fn update_subscription(
        &mut self,
        at: &TopicRef,
        id: &str,
        update: SubscriptionUpdate,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        let (_, subs) = self.topic_entry(at)?;
        let sub = subs
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or(StoreError::NotFound)?;
        *sub = sub.clone().updated(update, now);
        Ok(sub.clone())
    }

    pub(super) fn delete_subscription(
        &mut self,
        at: &TopicRef,
        id: &str,
    ) -> Result<(), StoreError> {
        let (_, subs) = self.topic_entry(at)?;
        let before = subs.len();
        subs.retain(|s| s.id != id);
        if subs.len() == before {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub(super) fn subscriptions(&self, at: &TopicRef) -> Result<Vec<Subscription>, StoreError> {
        let (_, subs) = self.topics.topics.get(at).ok_or(StoreError::NotFound)?;
        Ok(subs.clone())
    }

    /// The signing secrets of every subscription that has some, by id.
    pub(super) fn subscription_secrets(&self) -> Vec<(String, SigningSecrets)> {
        let subs = self.topics.topics.values().flat_map(|(_, subs)| subs);
        subs.filter(|s| !s.spec.signing_secrets.is_empty())
            .map(|s| (s.id.clone(), s.spec.signing_secrets.clone()))
            .collect()
    }

    /// The stored event with its deliveries' states now (a deleted task
    /// left out).
    fn shown(&self, stored: &StoredEvent) -> Event {
        let mut event = stored.event.clone();
        event.tasks = stored
            .made
            .iter()
            .filter_map(|(sub, id, _)| {
                let seq = self.by_id.get(id)?;
                Some(Delivery::of(sub, &self.tasks[seq]))
            })
            .collect();
        event
    }

    pub(super) fn event(&self, at: &TopicRef, id: &str) -> Result<Event, StoreError> {
        self.topics
            .events
            .iter()
            .find(|e| e.event.topic == *at && e.event.id == id)
            .map(|e| self.shown(e))
            .ok_or(StoreError::NotFound)
    }

    pub(super) fn publish(
        &mut self,
        new: NewEvent,
        id: String,
        now: Timestamp,
    ) -> Result<Published, StoreError> {
        let at = new.topic().clone();
        if let Some(known) = self
            .topics
            .events
            .iter()
            .find(|e| e.event.topic == at && e.event.idempotency_key == new.idempotency_key())
        {
            let fields = new.differing_fields(&known.event);
            if !fields.is_empty() {
                return Err(StoreError::IdempotencyConflict { fields });
            }
            return Ok(Published {
                event: self.shown(known),
                created: false,
            });
        }
        let subs = self.subscriptions(&at)?;
        let made: Vec<(String, NewTask, u32)> = subs
            .iter()
            .filter(|s| s.takes(new.event_type()))
            .map(|s| (s.id.clone(), new.task_for(&id, s), 0))
            .collect();
        let made = self.submit_all_or_none(made, now)?;
        let stored = StoredEvent {
            event: new.stored(id, now),
            made,
        };
        let event = self.shown(&stored);
        self.topics.events.push(stored);
        Ok(Published {
            event,
            created: true,
        })
    }

    /// Submits every task, or none when any one would be refused (its key
    /// taken by other work, its tenant full, the key gone).
    fn submit_all_or_none(
        &mut self,
        made: Vec<(String, NewTask, u32)>,
        now: Timestamp,
    ) -> Result<Vec<(String, tc_model::TaskId, u32)>, StoreError> {
        if let Some((_, first, _)) = made.first() {
            self.check_acting(first.acting().as_ref())?;
        }
        let mut fresh = 0u64;
        for (_, task, _) in &made {
            match self
                .by_key
                .get(&key_of(task.tenant(), task.idempotency_key()))
            {
                Some(seq) => {
                    let fields = task.differing_fields(&self.tasks[seq]);
                    if !fields.is_empty() {
                        return Err(StoreError::IdempotencyConflict { fields });
                    }
                }
                None => fresh += 1,
            }
        }
        if let (Some((_, first, _)), true) = (made.first(), fresh > 0)
            && let (Some(limit), Some(tenant)) = (first.pending_limit(), first.tenant())
            && self.open_tasks_of(tenant) + fresh > limit
        {
            return Err(StoreError::QuotaExceeded { limit });
        }
        let mut out = Vec::with_capacity(made.len());
        for (sub, task, n) in made {
            let Submitted { task: stored, .. } = self.submit_one(&task, now)?;
            out.push((sub, stored.id, n));
        }
        Ok(out)
    }

    pub(super) fn replay(
        &mut self,
        at: &TopicRef,
        id: &str,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<Delivery>, StoreError> {
        let sub = self
            .subscriptions(at)?
            .into_iter()
            .find(|s| s.id == id)
            .ok_or(StoreError::NotFound)?;
        let chosen: Vec<usize> = (0..self.topics.events.len())
            .filter(|&i| {
                let e = &self.topics.events[i].event;
                e.topic == *at
                    && e.created_at >= since
                    && sub.spec.event_types.matches(&e.event_type)
            })
            .take(MAX_REPLAY)
            .collect();
        let made: Vec<(String, NewTask, u32)> = chosen
            .iter()
            .map(|&i| {
                let stored = &self.topics.events[i];
                let n = 1 + stored
                    .made
                    .iter()
                    .filter(|(s, _, n)| *s == sub.id && *n > 0)
                    .count();
                let n = u32::try_from(n).unwrap_or(u32::MAX);
                (sub.id.clone(), stored.event.replay_task(&sub, n), n)
            })
            .collect();
        let made = self.submit_all_or_none(made, now)?;
        let mut deliveries = Vec::with_capacity(made.len());
        for (i, entry) in chosen.into_iter().zip(made) {
            let seq = self.by_id[&entry.1];
            deliveries.push(Delivery::of(&entry.0, &self.tasks[&seq]));
            self.topics.events[i].made.push(entry);
        }
        Ok(deliveries)
    }
}

/// `topic` with its subscription count.
fn counted(topic: &Topic, subs: &[Subscription]) -> Topic {
    Topic {
        subscriptions: u64::try_from(subs.len()).unwrap_or(u64::MAX),
        ..topic.clone()
    }
}
