//! The memory store's flow keys: each tenant's keys' settings and
//! buckets, and their counts read from the tasks.

use std::collections::BTreeMap;

use tc_model::Task;
use tc_model::cluster::Bucket;
use tc_model::flow_key::{
    FLOW_KEYS_LIMIT, FlowKey, FlowKeySettings, FlowKeyUpdate, KeyRef, KeyState,
};
use tc_model::store::StoreError;
use tc_model::{State, Timestamp};

/// Settings and buckets by key.
#[derive(Debug, Default)]
pub(super) struct FlowKeys {
    keys: BTreeMap<KeyRef, (FlowKeySettings, Option<Bucket>)>,
}

/// Whether `task` is of `key`.
fn is_of(task: &Task, key: &KeyRef) -> bool {
    tc_model::tenant::stored_tenant(task.tenant.as_deref()) == key.tenant
        && task.flow_key.as_deref() == Some(key.key.as_str())
}

fn view<'a>(
    tasks: impl Iterator<Item = &'a Task>,
    key: &KeyRef,
    settings: FlowKeySettings,
) -> FlowKey {
    let (mut in_flight, mut pending) = (0, 0);
    for task in tasks.filter(|t| is_of(t, key)) {
        match task.state {
            State::Running => in_flight += 1,
            State::Pending => pending += 1,
            _ => {}
        }
    }
    FlowKey {
        key: key.key.clone(),
        settings,
        in_flight,
        pending,
    }
}

impl FlowKeys {
    pub(super) fn put<'a>(
        &mut self,
        key: KeyRef,
        update: FlowKeyUpdate,
        tasks: impl Iterator<Item = &'a Task>,
    ) -> FlowKey {
        let entry = self.keys.entry(key.clone()).or_default();
        entry.0 = update.apply(&entry.0);
        view(tasks, &key, entry.0)
    }

    pub(super) fn get<'a>(
        &self,
        key: &KeyRef,
        tasks: impl Iterator<Item = &'a Task> + Clone,
    ) -> Result<FlowKey, StoreError> {
        match self.keys.get(key) {
            Some((settings, _)) => Ok(view(tasks, key, *settings)),
            None if tasks.clone().any(|t| is_of(t, key)) => {
                Ok(view(tasks, key, FlowKeySettings::default()))
            }
            None => Err(StoreError::NotFound),
        }
    }

    pub(super) fn list<'a>(
        &self,
        tenant: &str,
        tasks: impl Iterator<Item = &'a Task> + Clone,
    ) -> Vec<FlowKey> {
        self.keys
            .iter()
            .filter(|(key, _)| key.tenant == tenant)
            .take(FLOW_KEYS_LIMIT)
            .map(|(key, (settings, _))| view(tasks.clone(), key, *settings))
            .collect()
    }

    pub(super) fn delete(&mut self, key: &KeyRef) -> Result<(), StoreError> {
        self.keys
            .remove(key)
            .map(|_| ())
            .ok_or(StoreError::NotFound)
    }

    /// A key's state for a claim, its running tasks counted in `running`.
    pub(super) fn state(&self, key: &KeyRef, running: u64) -> KeyState {
        let (settings, bucket) = self.keys.get(key).copied().unwrap_or_default();
        KeyState {
            settings,
            running,
            bucket,
            held: false,
        }
    }

    /// Writes back a claim's charged buckets.
    pub(super) fn charge(&mut self, buckets: Vec<(KeyRef, Bucket)>, _now: Timestamp) {
        for (key, bucket) in buckets {
            if let Some(entry) = self.keys.get_mut(&key) {
                entry.1 = Some(bucket);
            }
        }
    }
}
