//! Callbacks: a task that asks for one (`callback_url`, `callback_on`) has,
//! when it ends in one of those states, a second task created in the same
//! store transaction: `POST callback_url` with the parent's view as JSON.
//!
//! The rule is here once, as pure functions returning data: [`task_for`]
//! builds the callback task ([`NewTask`]) from the terminal parent;
//! [`on_end`] is what an adapter that holds tasks as values (the memory
//! store) does at an end. The SQL adapters count the end (`ends + 1`) in
//! their terminal UPDATE, read the parent back, call [`task_for`] and insert
//! what it returns, all in the transaction that ended the parent.

pub(crate) mod asked;

pub use asked::{Callback, CallbackOn};

use crate::FirstRun;
use crate::view::TaskView;
use crate::{Headers, Method, NewTask, Task, TaskId};

/// The most bytes of the parent's result a callback body carries by
/// default (`--callback-result-bytes`).
pub const DEFAULT_RESULT_BYTES: usize = 64 * 1024;

/// The idempotency key of the callback for `parent`'s `end`-th end:
/// `callback:{id}` for the first, `callback:{id}:{n}` for the n-th after.
pub fn key(parent: TaskId, end: u32) -> String {
    if end <= 1 {
        format!("callback:{parent}")
    } else {
        format!("callback:{parent}:{end}")
    }
}

/// The callback task `parent` gets at the end it has just reached (its
/// state terminal, [`Task::ends`] counting this end), or `None` when it
/// asked for none or not for this state. The callback will have the id
/// `callback_id` (the body shows it as the parent's `callback_task_id`).
///
/// The body is the parent's view ([`TaskView`]) with its result as text cut
/// to `result_bytes` on a character boundary and `result_truncated`; the
/// key is [`key`]; the tries and their timeout are the parent's; it is a
/// POST with no headers of its own (its destination's apply) and carries
/// the parent's trace, and belongs to the parent's tenant.
pub fn task_for(parent: &Task, callback_id: TaskId, result_bytes: usize) -> Option<NewTask> {
    let callback = parent.callback.as_ref()?;
    if !parent.state.is_terminal() || !callback.on().includes(parent.state) {
        return None;
    }
    let shown = Task {
        callback_task_id: Some(callback_id),
        ..parent.clone()
    };
    // A view holds strings, numbers and string-keyed maps only: writing it
    // cannot fail.
    let body = serde_json::to_vec(&TaskView::for_callback(&shown, result_bytes)).ok()?;
    // Built directly rather than through `NewTask::new`: the url was checked
    // when the parent was submitted, the key is ASCII and short, the tries
    // and timeout are the parent's (valid), and a body the server writes is
    // not held to the submit limit.
    Some(NewTask {
        topic: None,
        url: callback.url().to_owned(),
        body,
        idempotency_key: key(parent.id, parent.ends),
        max_attempts: parent.max_attempts,
        timeout: parent.timeout,
        first_run: FirstRun::Now,
        method: Method::Post,
        headers: Headers::default(),
        trace: parent.trace.clone(),
        callback: None,
        callback_of: Some(parent.id),
        // The parent's tenant's, its key unique there; never refused for
        // the tenant's quota: the end it reports has happened.
        tenant: parent.tenant.clone(),
        pending_limit: None,
        key_id: None,
        // Reported as urgently as the parent's own call.
        priority: parent.priority,
        // Not the parent's key: the callback calls another url, which
        // the parent's limits have nothing to do with.
        flow_key: None,
    })
}

/// What an end does to a task held as a value, beside its state: counts
/// the end and, when [`task_for`] makes a callback, keeps its id. Returns
/// the callback to create in the same write.
pub fn on_end(task: &mut Task, callback_id: TaskId, result_bytes: usize) -> Option<NewTask> {
    task.ends = task.ends.saturating_add(1);
    let callback = task_for(task, callback_id, result_bytes)?;
    task.callback_task_id = Some(callback_id);
    Some(callback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, State, Timestamp};
    use std::time::Duration;

    #[test]
    fn callback_on_parses_a_non_empty_subset() {
        let check = |names: &[&str], expected: Result<&[&str], &str>| {
            let got = CallbackOn::parse(names.iter().copied());
            match (got, expected) {
                (Ok(on), Ok(want)) => {
                    assert_eq!(on.names(), want, "{names:?}");
                    assert_eq!(CallbackOn::from_stored(&on.to_stored()), Some(on));
                }
                (Err(message), Err(part)) => assert!(message.contains(part), "{message}"),
                (got, expected) => panic!("{names:?}: expected {expected:?}, got {got:?}"),
            }
        };
        check(&["success"], Ok(&["success"]));
        check(&["canceled", "success"], Ok(&["success", "canceled"]));
        check(
            &["failed", "canceled", "success"],
            Ok(&["success", "failed", "canceled"]),
        );
        check(&[], Err("at least one"));
        check(&["success", "success"], Err("twice"));
        check(&["pending"], Err("\"pending\""));
        check(&["Success"], Err("\"Success\""));
        assert_eq!(CallbackOn::default().names(), ["success", "failed"]);
        assert_eq!(CallbackOn::from_stored(""), None);
        assert_eq!(CallbackOn::from_stored("success,nope"), None);
    }

    #[test]
    fn a_callback_url_follows_the_url_rules_and_names_its_field() {
        assert!(Callback::new("https://hooks.test/done".into(), CallbackOn::default()).is_ok());
        for bad in ["", "ftp://h/", "http://u@h/", "http://h/../x", "/relative"] {
            let e = Callback::new(bad.into(), CallbackOn::default()).unwrap_err();
            assert_eq!(e.field(), "callback_url", "{bad}");
            assert!(e.to_string().starts_with("callback_url: "), "{e}");
        }
    }

    #[test]
    fn the_n_th_end_has_its_own_key() {
        let id = TaskId::new(Timestamp::from_millis(1), [1; 10]);
        let check = |end: u32, expected: String| assert_eq!(key(id, end), expected);
        check(1, format!("callback:{id}"));
        check(2, format!("callback:{id}:2"));
        check(7, format!("callback:{id}:7"));
    }

    fn parent(on: &[&str]) -> Task {
        let new = NewTask::new(
            "http://a.test/x".into(),
            b"{}".to_vec(),
            "k".into(),
            4,
            Duration::from_millis(1500),
            &Limits::default(),
        )
        .unwrap()
        .with_callback(
            Callback::new(
                "http://b.test/cb".into(),
                CallbackOn::parse(on.iter().copied()).unwrap(),
            )
            .unwrap(),
        );
        Task::submitted(
            TaskId::new(Timestamp::from_millis(5), [2; 10]),
            &new,
            Timestamp::from_millis(5),
        )
    }

    /// Each row: the parent's end and whether it gets a callback.
    #[test]
    fn a_callback_is_made_for_the_ends_asked_for() {
        let check = |on: &[&str], state: State, made: bool| {
            let mut task = parent(on);
            task.state = state;
            let callback_id = TaskId::new(Timestamp::from_millis(9), [3; 10]);
            let got = on_end(&mut task, callback_id, 10);
            assert_eq!(got.is_some(), made, "{on:?} {state}");
            assert_eq!(task.ends, 1);
            assert_eq!(task.callback_task_id, made.then_some(callback_id));
        };
        check(&["success", "failed"], State::Success, true);
        check(&["success", "failed"], State::Failed, true);
        check(&["success", "failed"], State::Canceled, false);
        check(&["canceled"], State::Canceled, true);
        check(&["canceled"], State::Success, false);
        check(&["success", "failed", "canceled"], State::Pending, false);
        let mut plain = parent(&["success"]);
        plain.callback = None;
        plain.state = State::Success;
        assert_eq!(task_for(&plain, plain.id, 10), None, "no callback_url");
    }

    #[test]
    fn the_callback_posts_the_parent_s_view() {
        let mut task = parent(&["success"]);
        task.state = State::Success;
        task.ends = 2;
        task.result = Some("héllo wörld".as_bytes().to_vec());
        let callback_id = TaskId::new(Timestamp::from_millis(9), [3; 10]);
        let new = task_for(&task, callback_id, 2).unwrap();
        assert_eq!(new.url(), "http://b.test/cb");
        assert_eq!(new.idempotency_key(), format!("callback:{}:2", task.id));
        assert_eq!(new.max_attempts(), 4);
        assert_eq!(new.timeout(), Duration::from_millis(1500));
        assert_eq!(new.method(), Method::Post);
        assert_eq!(new.callback_of(), Some(task.id));
        assert_eq!(new.callback(), None);
        let view: serde_json::Value = serde_json::from_slice(new.body()).unwrap();
        assert_eq!(view["id"], task.id.to_string());
        assert_eq!(view["state"], "success");
        assert_eq!(view["callback_task_id"], callback_id.to_string());
        // 2 bytes end inside "é": the cut goes back to a character boundary.
        assert_eq!(view["result"], "h");
        assert_eq!(view["result_truncated"], true);
        let whole = task_for(&task, callback_id, 64).unwrap();
        let view: serde_json::Value = serde_json::from_slice(whole.body()).unwrap();
        assert_eq!(view["result"], "héllo wörld");
        assert_eq!(view["result_truncated"], false);
    }
}
