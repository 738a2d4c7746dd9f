//! The port's methods as one list ([`crate::port_methods`]), from which
//! a forwarder of the port writes its impls: one line a method, grouped by
//! the port's parts.

/// Hands the port's methods to the macro `$then`, part by part: `path
/// [plain] { entries }`, where `path` is the part's trait, `plain` its
/// methods that are not async and have a default (`fn name(&self) ->
/// Type;`), and each entry `Name => fn name(&self, arg: Type, ...) ->
/// OkType;` with every path whole. A forwarder of the port (tc-testkit's
/// `Hooked`, tc-server's `AnyStore`) is written from this list, so a new
/// port method is one line here, not one method per forwarder.
#[macro_export]
macro_rules! port_methods {
    ($then:ident) => {
        $then! {
            $crate::store::Tasks [] {
                Submit => fn submit(&self, task: $crate::NewTask, now: $crate::Timestamp) -> $crate::store::Submitted;
                SubmitMany => fn submit_many(&self, tasks: ::std::vec::Vec<$crate::NewTask>, now: $crate::Timestamp)
                    -> ::std::vec::Vec<::core::result::Result<$crate::store::Submitted, $crate::store::StoreError>>;
                Get => fn get(&self, id: $crate::TaskId, scope: $crate::tenant::Scope) -> $crate::Task;
                List => fn list(&self, query: $crate::store::ListQuery, scope: $crate::tenant::Scope) -> $crate::store::Page;
                CountByState => fn count_by_state(&self) -> $crate::store::StateCounts;
                Cancel => fn cancel(&self, id: $crate::TaskId, scope: $crate::tenant::Scope, now: $crate::Timestamp) -> $crate::Task;
                Delete => fn delete(&self, id: $crate::TaskId, scope: $crate::tenant::Scope) -> ();
                Prune => fn prune(&self, state: $crate::State, older_than: ::core::time::Duration, now: $crate::Timestamp, limit: usize)
                    -> usize;
                Retry => fn retry(&self, id: $crate::TaskId, run_at: $crate::Timestamp, now: $crate::Timestamp, acting: ::core::option::Option<$crate::tenant::Acting>)
                    -> $crate::Task;
                Health => fn health(&self) -> ();
                Bulk => fn bulk(&self, request: $crate::store::BulkRequest) -> $crate::store::BulkOutcome;
            }
            $crate::store::Work [fn leads_upkeep(&self) -> bool;] {
                Claim => fn claim(&self, n: usize, now: $crate::Timestamp, lease: ::core::time::Duration, gate: $crate::destination::ClaimGate) -> $crate::claim::Claim;
                Heartbeat => fn heartbeat(&self, running: ::std::vec::Vec<($crate::TaskId, u32)>, now: $crate::Timestamp, lease: ::core::time::Duration)
                    -> ::std::vec::Vec<$crate::store::LeaseLost>;
                Complete => fn complete(&self, id: $crate::TaskId, attempt: u32, outcome: $crate::store::Completion, now: $crate::Timestamp)
                    -> $crate::store::Guarded;
                Release => fn release(&self, id: $crate::TaskId, attempt: u32, now: $crate::Timestamp) -> $crate::store::Guarded;
                RecoverExpired => fn recover_expired(&self, now: $crate::Timestamp) -> usize;
                NextDue => fn next_due(&self) -> ::core::option::Option<$crate::Timestamp>;
                TakeTokens => fn take_tokens(&self, asks: ::std::vec::Vec<$crate::cluster::TokenAsk>, now: $crate::Timestamp)
                    -> ::std::vec::Vec<$crate::cluster::TokenGrant>;
                ShareHolds => fn share_holds(
                    &self, learned: ::std::vec::Vec<(::std::string::String, $crate::cluster::DestinationHolds)>, now: $crate::Timestamp)
                    -> ::std::vec::Vec<(::std::string::String, $crate::cluster::DestinationHolds)>;
            }
            $crate::store::Destinations [] {
                DestinationSettings => fn destination_settings(&self) -> ::std::vec::Vec<(::std::string::String, $crate::destination::DestinationSettings)>;
                Destinations => fn destinations(&self) -> ::std::vec::Vec<$crate::destination::Destination>;
                Destination => fn destination(&self, name: ::std::string::String) -> $crate::destination::Destination;
                UpdateDestination => fn update_destination(
                    &self, name: ::std::string::String, update: $crate::destination::DestinationUpdate, now: $crate::Timestamp) -> $crate::destination::Destination;
            }
            $crate::store::Schedules [] {
                CreateSchedule => fn create_schedule(&self, spec: $crate::schedule::ScheduleSpec, now: $crate::Timestamp) -> $crate::schedule::Schedule;
                UpdateSchedule => fn update_schedule(
                    &self, name: ::std::string::String, change: $crate::schedule::ScheduleChange, now: $crate::Timestamp) -> $crate::schedule::Schedule;
                DeleteSchedule => fn delete_schedule(&self, name: ::std::string::String) -> ();
                Schedules => fn schedules(&self) -> ::std::vec::Vec<$crate::schedule::Schedule>;
                Schedule => fn schedule(&self, name: ::std::string::String) -> $crate::schedule::Schedule;
                RecordFiring => fn record_firing(&self, name: ::std::string::String, at: $crate::Timestamp, task: $crate::TaskId) -> bool;
                RecordFiringError => fn record_firing_error(&self, name: ::std::string::String, error: $crate::schedule::FiringError) -> bool;
            }
            $crate::store::Tenants [] {
                CreateTenant => fn create_tenant(&self, name: ::std::string::String, settings: $crate::tenant::TenantUpdate, now: $crate::Timestamp)
                    -> $crate::tenant::Tenant;
                UpdateTenant => fn update_tenant(&self, name: ::std::string::String, update: $crate::tenant::TenantUpdate, now: $crate::Timestamp)
                    -> $crate::tenant::Tenant;
                DeleteTenant => fn delete_tenant(&self, name: ::std::string::String) -> ();
                Tenants => fn tenants(&self) -> ::std::vec::Vec<$crate::tenant::TenantDetail>;
                TenantSettings => fn tenant_settings(&self) -> ::std::collections::BTreeMap<::std::string::String, $crate::tenant::TenantSettings>;
                Tenant => fn tenant(&self, name: ::std::string::String) -> $crate::tenant::TenantDetail;
                CreateApiKey => fn create_api_key(
                    &self, tenant: ::std::string::String, id: ::std::string::String, hash: $crate::tenant::key::KeyHash, now: $crate::Timestamp) -> $crate::tenant::key::ApiKey;
                RevokeApiKey => fn revoke_api_key(&self, tenant: ::std::string::String, id: ::std::string::String) -> ();
                ApiKey => fn api_key(&self, hash: $crate::tenant::key::KeyHash) -> ::core::option::Option<$crate::tenant::key::KeyOwner>;
                TouchApiKey => fn touch_api_key(&self, id: ::std::string::String, at: $crate::Timestamp) -> ();
                ServerKey => fn server_key(&self, name: ::std::string::String, candidate: ::std::string::String) -> ::std::string::String;
            }
            $crate::store::FlowKeys [] {
                PutFlowKey => fn put_flow_key(
                    &self, tenant: ::core::option::Option<::std::string::String>, key: ::std::string::String,
                    update: $crate::flow_key::FlowKeyUpdate, now: $crate::Timestamp) -> $crate::flow_key::FlowKey;
                FlowKey => fn flow_key(&self, tenant: ::core::option::Option<::std::string::String>, key: ::std::string::String)
                    -> $crate::flow_key::FlowKey;
                FlowKeys => fn flow_keys(&self, tenant: ::core::option::Option<::std::string::String>)
                    -> ::std::vec::Vec<$crate::flow_key::FlowKey>;
                DeleteFlowKey => fn delete_flow_key(&self, tenant: ::core::option::Option<::std::string::String>, key: ::std::string::String)
                    -> ();
            }
            $crate::store::Topics [] {
                PutTopic => fn put_topic(&self, at: $crate::topic::TopicRef, spec: $crate::topic::TopicSpec, now: $crate::Timestamp)
                    -> ($crate::topic::Topic, bool);
                Topics => fn topics(&self, tenant: ::core::option::Option<::std::string::String>) -> ::std::vec::Vec<$crate::topic::Topic>;
                Topic => fn topic(&self, at: $crate::topic::TopicRef) -> $crate::topic::Topic;
                DeleteTopic => fn delete_topic(&self, at: $crate::topic::TopicRef) -> ();
                CreateSubscription => fn create_subscription(
                    &self, at: $crate::topic::TopicRef, id: ::std::string::String, spec: $crate::topic::SubscriptionSpec, now: $crate::Timestamp)
                    -> $crate::topic::Subscription;
                UpdateSubscription => fn update_subscription(
                    &self, at: $crate::topic::TopicRef, id: ::std::string::String, update: $crate::topic::SubscriptionUpdate, now: $crate::Timestamp)
                    -> $crate::topic::Subscription;
                DeleteSubscription => fn delete_subscription(&self, at: $crate::topic::TopicRef, id: ::std::string::String) -> ();
                Subscriptions => fn subscriptions(&self, at: $crate::topic::TopicRef) -> ::std::vec::Vec<$crate::topic::Subscription>;
                SubscriptionSecrets => fn subscription_secrets(&self)
                    -> ::std::vec::Vec<(::std::string::String, $crate::signing::SigningSecrets)>;
                SubscriptionTryEnded => fn subscription_try_ended(&self, id: ::std::string::String, ok: bool, now: $crate::Timestamp)
                    -> $crate::topic::health::HealthChange;
                Publish => fn publish(&self, event: $crate::topic::event::NewEvent, id: ::std::string::String, now: $crate::Timestamp)
                    -> $crate::topic::event::Published;
                Event => fn event(&self, at: $crate::topic::TopicRef, id: ::std::string::String) -> $crate::topic::event::Event;
                Replay => fn replay(
                    &self, at: $crate::topic::TopicRef, id: ::std::string::String, since: $crate::Timestamp, now: $crate::Timestamp)
                    -> ::std::vec::Vec<$crate::topic::Delivery>;

            }
        }
    };
}
