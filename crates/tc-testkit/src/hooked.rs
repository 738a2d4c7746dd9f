//! One generic forwarder of the store port, for tests that stand between
//! the store and its caller: [`Hooked`] passes every call to the store it
//! wraps, and lets its [`Hooks`] act before the call (fail it, hold it,
//! count it) and after the answer (hold it, count it). Its methods are
//! written from the port's own list ([`tc_model::port_methods`]), so a
//! wrapper is a set of hooks, not a forwarding of every method.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;

use tc_model::store::{StoreError, TaskStore};

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

/// Writes [`Call`] and the forwarding of every port method, part by part,
/// from one list.
macro_rules! forward {
    ($(
        $part:path [$( fn $plain:ident(&self) -> $plain_out:ty; )*] {
            $( $call:ident => fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $out:ty; )*
        }
    )*) => {
        /// A call of the store port, by method.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Call {
            $($(
                #[doc = concat!("`", stringify!($name), "` of the store port.")]
                $call,
            )*)*
        }

        $(
            impl<S: TaskStore, H: Hooks> $part for Hooked<S, H> {
                $(
                    fn $plain(&self) -> $plain_out {
                        self.inner.$plain()
                    }
                )*

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
        )*
    };
}

tc_model::port_methods!(forward);

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use tc_model::store::Submitted;
    use tc_model::{NewTask, Timestamp};

    use super::*;
    use crate::memory_store::MemoryStore;
    use tc_model::store::Tasks;
    use tc_model::tenant::Scope;

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
        let refused = store.get(submitted.task.id, Scope::Admin).await;
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
