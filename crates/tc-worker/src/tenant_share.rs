//! The worker's side of the tenants' fair share: each tenant's
//! weight, as last read from the store, and this node's calls in flight by
//! tenant. Each claim gets them as a [`TenantGate`], and the store shares
//! every destination's slots among the tenants with due tasks there in
//! proportion to their weights ([`TenantGate::plan`]). With no tenant
//! stored the claim gets no gate and is tenant-blind, exactly as before.
//!
//! This is per node, like the destinations' fair share: on a shared
//! database each node shares its own slots.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tc_model::Task;
use tc_model::tenant::{TenantGate, stored_tenant};

#[derive(Default)]
struct State {
    /// `None` while no tenant is stored.
    weights: Option<BTreeMap<String, u32>>,
    /// Calls in flight here by stored tenant (`""`: none); zeros removed.
    in_flight: HashMap<String, usize>,
}

/// The weights and the calls in flight by tenant.
#[derive(Default)]
pub(crate) struct TenantShare {
    state: Mutex<State>,
}

impl TenantShare {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is one map write: nothing half done to see.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the stored tenants' weights as they are now (by name; none
    /// stored: no gate).
    pub(crate) fn set_weights(&self, weights: BTreeMap<String, u32>) {
        self.lock().weights = (!weights.is_empty()).then_some(weights);
    }

    /// Counts the attempts a claim started.
    pub(crate) fn started(&self, tasks: &[Task]) {
        let mut state = self.lock();
        for task in tasks {
            *state
                .in_flight
                .entry(stored_tenant(task.tenant.as_deref()).to_owned())
                .or_default() += 1;
        }
    }

    /// An attempt of a task of `tenant` (as stored) ended.
    pub(crate) fn ended(&self, tenant: &str) {
        let mut state = self.lock();
        if let Some(n) = state.in_flight.get_mut(tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.in_flight.remove(tenant);
            }
        }
    }

    /// The share for the next claim; `None` while no tenant is stored.
    pub(crate) fn gate(&self) -> Option<TenantGate> {
        let state = self.lock();
        let weights = state.weights.clone()?;
        Some(TenantGate {
            weights,
            in_flight: state
                .in_flight
                .iter()
                .map(|(tenant, n)| (tenant.clone(), *n))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    use tc_model::{Limits, NewTask, TaskId, Timestamp};

    fn task(tenant: Option<&str>, n: u8) -> Task {
        let new = NewTask::new(
            "http://a.test/".into(),
            Vec::new(),
            format!("k{n}"),
            1,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .unwrap()
        .with_tenant(tenant.map(str::to_owned), None);
        let at = Timestamp::from_millis(1);
        Task::submitted(TaskId::new(at, [n; 10]), &new, at)
    }

    fn weights(of: &[(&str, u32)]) -> BTreeMap<String, u32> {
        of.iter()
            .map(|(name, w)| ((*name).to_owned(), *w))
            .collect()
    }

    #[test]
    fn no_tenant_no_gate() {
        let share = TenantShare::default();
        share.started(&[task(None, 1)]);
        assert_eq!(share.gate(), None);
        share.set_weights(weights(&[("a", 3)]));
        share.set_weights(BTreeMap::new());
        assert_eq!(share.gate(), None);
    }

    #[test]
    fn the_gate_carries_the_weights_and_the_calls_in_flight() {
        let share = TenantShare::default();
        share.set_weights(weights(&[("a", 3), ("b", 1)]));
        share.started(&[task(Some("a"), 1), task(Some("a"), 2), task(None, 3)]);
        share.ended("a");
        share.ended("");
        share.ended("never-started");
        let gate = share.gate().unwrap();
        assert_eq!(
            gate.weights,
            BTreeMap::from([("a".to_owned(), 3), ("b".to_owned(), 1)])
        );
        assert_eq!(gate.in_flight, BTreeMap::from([("a".to_owned(), 1)]));
    }
}
