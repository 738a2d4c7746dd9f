//! One generic forwarder of the store port, for tests that stand between
//! the store and its caller: [`Hooked`] passes every call to the store it
//! wraps, and lets its [`Hooks`] act before the call (fail it, hold it,
//! count it) and after the answer (hold it, count it). The list below is
//! the one place, beside the port and the adapters, where a port method is
//! written: a wrapper is a set of hooks, not a forwarding of every method.

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tc_model::claim::Claim;
use tc_model::destination::{ClaimGate, Destination, DestinationSettings, DestinationUpdate};
use tc_model::schedule::{FiringError, Schedule, ScheduleChange, ScheduleSpec};
use tc_model::store::{
    BulkOutcome, BulkRequest, Completion, Guarded, LeaseLost, ListQuery, Page, StateCounts,
    StoreError, Submitted, TaskStore,
};
use tc_model::tenant::key::{ApiKey, KeyHash, KeyOwner};
use tc_model::tenant::{Acting, Tenant, TenantDetail, TenantSettings, TenantUpdate};
use tc_model::{NewTask, State, Task, TaskId, Timestamp};

/// A store answer as a hook sees it: the value (to downcast to the
/// method's own `Ok` type), or the error.
pub type Answer<'a> = Result<&'a (dyn Any + Send + Sync), &'a StoreError>;

/// What a test does around the calls that pass through a [`Hooked`] store.
pub trait Hooks: Send + Sync + 'static {
    /// Before `call` reaches the store; an error answers the call instead.
    fn before(&self, call: Call) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = call;
        async { Ok(()) }
    }

    /// After the store answered `call`, before its caller hears back.
    fn after(&self, call: Call, answer: Answer<'_>) -> impl Future<Output = ()> + Send {
        let _ = (call, answer);
        async {}
    }
}

/// `inner` with `hooks` around each of its calls.
pub struct Hooked<S, H> {
    inner: Arc<S>,
    hooks: H,
}

impl<S, H> Hooked<S, H> {
    /// Wraps `inner`.
    pub fn with_hooks(inner: Arc<S>, hooks: H) -> Hooked<S, H> {
        Hooked { inner, hooks }
    }

    /// The hooks, for a test to arm or read them.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }
}

/// Writes [`Call`] and the forwarding of every port method from one list.
macro_rules! forward {
    ($( $call:ident => fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $out:ty; )*) => {
        /// A call of the store port, by method.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Call {
            $(
                #[doc = concat!("`TaskStore::", stringify!($name), "`.")]
                $call,
            )*
        }

        impl<S: TaskStore, H: Hooks> TaskStore for Hooked<S, H> {
            fn leads_upkeep(&self) -> bool {
                self.inner.leads_upkeep()
            }

            $(
                async fn $name(&self $(, $arg: $ty)*) -> Result<$out, StoreError> {
                    self.hooks.before(Call::$call).await?;
                    let answer = self.inner.$name($($arg),*).await;
                    let seen: Answer<'_> = match &answer {
                        Ok(value) => Ok(value),
                        Err(e) => Err(e),
                    };
                    self.hooks.after(Call::$call, seen).await;
                    answer
                }
            )*
        }
    };
}

forward! {
    Submit => fn submit(&self, task: NewTask, now: Timestamp) -> Submitted;
    SubmitMany => fn submit_many(&self, tasks: Vec<NewTask>, now: Timestamp)
        -> Vec<Result<Submitted, StoreError>>;
    Get => fn get(&self, id: TaskId) -> Task;
    List => fn list(&self, query: ListQuery) -> Page;
    CountByState => fn count_by_state(&self) -> StateCounts;
    Claim => fn claim(&self, n: usize, now: Timestamp, lease: Duration, gate: ClaimGate) -> Claim;
    Heartbeat => fn heartbeat(&self, running: Vec<(TaskId, u32)>, now: Timestamp, lease: Duration)
        -> Vec<LeaseLost>;
    Complete => fn complete(&self, id: TaskId, attempt: u32, outcome: Completion, now: Timestamp)
        -> Guarded;
    Cancel => fn cancel(&self, id: TaskId, now: Timestamp) -> Task;
    Release => fn release(&self, id: TaskId, attempt: u32, now: Timestamp) -> Guarded;
    RecoverExpired => fn recover_expired(&self, now: Timestamp) -> usize;
    Delete => fn delete(&self, id: TaskId) -> ();
    Prune => fn prune(&self, state: State, older_than: Duration, now: Timestamp, limit: usize)
        -> usize;
    Retry => fn retry(&self, id: TaskId, run_at: Timestamp, now: Timestamp, acting: Option<Acting>)
        -> Task;
    NextDue => fn next_due(&self) -> Option<Timestamp>;
    Health => fn health(&self) -> ();
    Bulk => fn bulk(&self, request: BulkRequest) -> BulkOutcome;
    DestinationSettings => fn destination_settings(&self) -> Vec<(String, DestinationSettings)>;
    Destinations => fn destinations(&self) -> Vec<Destination>;
    Destination => fn destination(&self, name: String) -> Destination;
    UpdateDestination => fn update_destination(
        &self, name: String, update: DestinationUpdate, now: Timestamp) -> Destination;
    CreateSchedule => fn create_schedule(&self, spec: ScheduleSpec, now: Timestamp) -> Schedule;
    UpdateSchedule => fn update_schedule(
        &self, name: String, change: ScheduleChange, now: Timestamp) -> Schedule;
    DeleteSchedule => fn delete_schedule(&self, name: String) -> ();
    Schedules => fn schedules(&self) -> Vec<Schedule>;
    Schedule => fn schedule(&self, name: String) -> Schedule;
    RecordFiring => fn record_firing(&self, name: String, at: Timestamp, task: TaskId) -> bool;
    RecordFiringError => fn record_firing_error(&self, name: String, error: FiringError) -> bool;
    CreateTenant => fn create_tenant(&self, name: String, settings: TenantUpdate, now: Timestamp)
        -> Tenant;
    UpdateTenant => fn update_tenant(&self, name: String, update: TenantUpdate, now: Timestamp)
        -> Tenant;
    DeleteTenant => fn delete_tenant(&self, name: String) -> ();
    Tenants => fn tenants(&self) -> Vec<TenantDetail>;
    TenantSettings => fn tenant_settings(&self) -> BTreeMap<String, TenantSettings>;
    Tenant => fn tenant(&self, name: String) -> TenantDetail;
    CreateApiKey => fn create_api_key(
        &self, tenant: String, id: String, hash: KeyHash, now: Timestamp) -> ApiKey;
    RevokeApiKey => fn revoke_api_key(&self, tenant: String, id: String) -> ();
    ApiKey => fn api_key(&self, hash: KeyHash) -> Option<KeyOwner>;
    TouchApiKey => fn touch_api_key(&self, id: String, at: Timestamp) -> ();
    ServerKey => fn server_key(&self, name: String, candidate: String) -> String;
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::memory_store::MemoryStore;

    /// Records the calls it sees and fails `Get`.
    #[derive(Default)]
    struct Record(Mutex<Vec<(Call, bool)>>);

    impl Hooks for Record {
        async fn before(&self, call: Call) -> Result<(), StoreError> {
            if call == Call::Get {
                return Err(StoreError::Unavailable("hooked".into()));
            }
            Ok(())
        }

        async fn after(&self, call: Call, answer: Answer<'_>) {
            let created = answer
                .ok()
                .and_then(|a| a.downcast_ref::<Submitted>())
                .is_some_and(|s| s.created);
            self.0.lock().unwrap().push((call, created));
        }
    }

    #[tokio::test]
    async fn calls_pass_through_with_their_hooks() {
        let store = Hooked::with_hooks(Arc::new(MemoryStore::new()), Record::default());
        let task = NewTask::new(
            "http://h/x".into(),
            b"{}".to_vec(),
            "k".into(),
            3,
            Duration::from_secs(5),
            &tc_model::Limits::default(),
        )
        .unwrap();
        let submitted = store.submit(task, Timestamp::from_millis(1)).await.unwrap();
        let refused = store.get(submitted.task.id).await;
        assert!(
            matches!(refused, Err(StoreError::Unavailable(_))),
            "{refused:?}"
        );
        store.health().await.unwrap();
        assert_eq!(
            *store.hooks().0.lock().unwrap(),
            [(Call::Submit, true), (Call::Health, false)]
        );
    }
}
