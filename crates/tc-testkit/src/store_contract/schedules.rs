//! Schedules: created once per name, kept field by field,
//! changed, paused, deleted (their tasks stay), and the firing record, a
//! guarded write that never moves backwards, with the error of a firing
//! that created no task.

use std::time::Duration;

use tc_model::schedule::{
    CatchUp, CronPattern, FiringError, Overlap, Recurrence, Schedule, ScheduleChange, ScheduleSpec,
    TaskTemplate, Zone, firing_key,
};
use tc_model::store::{StoreError, TaskStore};
use tc_model::{FirstRun, Headers, Method, NewTask};

use super::Verdict;
use super::check::*;

/// A spec with every field away from its default, so a store that drops
/// one is seen.
fn spec(name: &str, cron: &str) -> Result<ScheduleSpec, String> {
    let headers =
        Headers::parse(vec![("x-team".to_owned(), "ops".to_owned())]).map_err(|e| e.to_string())?;
    let task = NewTask::new(
        URL.to_owned(),
        br#"{"report":"daily"}"#.to_vec(),
        "template".to_owned(),
        4,
        Duration::from_millis(2500),
        &tc_model::Limits::default(),
    )
    .and_then(|t| t.with_method(Method::Put))
    .and_then(|t| t.with_first_run(FirstRun::After(Duration::from_secs(30))))
    .and_then(|t| t.with_priority(6))
    .and_then(|t| t.with_flow_key(Some("customer-7".to_owned())))
    .map(|t| t.with_headers(headers))
    .map_err(|e| e.to_string())?;
    Ok(ScheduleSpec {
        name: name.to_owned(),
        when: Recurrence {
            cron: CronPattern::from_stored(cron).map_err(|e| e.to_string())?,
            zone: Zone::parse("Europe/Berlin").map_err(|e| e.to_string())?,
        },
        task: TaskTemplate::of(task),
        paused: true,
        overlap: Overlap::Skip,
        catch_up: CatchUp::Latest,
    })
}

/// A created schedule reads back as created, by name and in the list (in
/// name order); a second of the same name is refused and changes nothing;
/// a change replaces every field but the firing record; pause and resume
/// flip `paused` alone; a deleted schedule is gone, and its name free.
pub async fn schedules_are_kept_field_by_field<S: TaskStore>(store: S) -> Verdict {
    let listed = store.schedules().await.step("schedules")?;
    ensure!(listed.is_empty(), "a fresh store lists {listed:?}");
    let nightly = spec("nightly", "30 2 * * *")?;
    let created = store
        .create_schedule(nightly.clone(), at(0))
        .await
        .step("create")?;
    ensure_eq!(
        created,
        Schedule::new(nightly.clone(), at(0)),
        "create's answer"
    );
    let second = store
        .create_schedule(spec("hourly", "@hourly")?, at(1))
        .await
        .step("create another")?;
    ensure_eq!(
        store.schedule("nightly".into()).await.step("schedule")?,
        created,
        "read back by name"
    );
    ensure_eq!(
        store.schedules().await.step("schedules")?,
        vec![second.clone(), created.clone()],
        "the list, in name order"
    );
    let mut other = spec("nightly", "0 * * * *")?;
    other.paused = false;
    ensure_eq!(
        store.create_schedule(other.clone(), at(2)).await,
        Err(StoreError::Exists),
        "a taken name"
    );
    ensure_eq!(
        store.schedule("nightly".into()).await.step("schedule")?,
        created,
        "after the refused create"
    );

    // A firing, then a change: the record stays.
    let task = create(&store, new_task("schedule:nightly:1"), at(10)).await?;
    ensure!(
        store
            .record_firing("nightly".into(), at(10), task.id)
            .await
            .step("record")?,
        "the first firing record applies"
    );
    let mut replacement = spec("nightly", "*/5 * * * *")?;
    replacement.overlap = Overlap::Allow;
    replacement.catch_up = CatchUp::None;
    replacement.paused = false;
    let changed = store
        .update_schedule(
            "nightly".into(),
            ScheduleChange::Replace(Box::new(replacement.clone())),
            at(20),
        )
        .await
        .step("replace")?;
    let want = Schedule {
        spec: replacement.clone(),
        last_run_at: Some(at(10)),
        last_task_id: Some(task.id),
        last_error: None,
        created_at: at(0),
        updated_at: at(20),
    };
    ensure_eq!(changed, want, "replace's answer");
    ensure_eq!(
        store.schedule("nightly".into()).await.step("schedule")?,
        want,
        "read back after replace"
    );
    for (paused, t) in [(true, 30), (false, 40)] {
        let flipped = store
            .update_schedule("nightly".into(), ScheduleChange::Paused(paused), at(t))
            .await
            .step("pause or resume")?;
        let mut expected = want.clone();
        expected.spec.paused = paused;
        expected.updated_at = at(t);
        ensure_eq!(flipped, expected, "paused = {paused}");
        ensure_eq!(
            store.schedule("nightly".into()).await.step("schedule")?,
            expected,
            "read back, paused = {paused}"
        );
    }

    // Unknown names.
    ensure_eq!(
        store.schedule("nope".into()).await,
        Err(StoreError::NotFound),
        "get"
    );
    ensure_eq!(
        store
            .update_schedule("nope".into(), ScheduleChange::Paused(true), at(50))
            .await,
        Err(StoreError::NotFound),
        "update"
    );
    ensure_eq!(
        store.delete_schedule("nope".into()).await,
        Err(StoreError::NotFound),
        "delete"
    );

    // Delete: gone, the name free, its task kept.
    store
        .delete_schedule("nightly".into())
        .await
        .step("delete")?;
    ensure_eq!(
        store.schedule("nightly".into()).await,
        Err(StoreError::NotFound),
        "after delete"
    );
    ensure_eq!(
        store.schedules().await.step("schedules")?,
        vec![second],
        "the list after delete"
    );
    get(&store, task.id).await?;
    ensure!(
        !store
            .record_firing("nightly".into(), at(60), task.id)
            .await
            .step("record on a deleted schedule")?,
        "a firing record of a deleted schedule applies"
    );
    let again = store
        .create_schedule(nightly.clone(), at(70))
        .await
        .step("create again")?;
    ensure_eq!(again, Schedule::new(nightly, at(70)), "recreated, unfired");
    Ok(())
}

/// The firing record moves only forward: a later fire time replaces it, an
/// earlier or equal one (a slower node's) leaves it; the firing's task is
/// the one a submit with the firing's key made, once across callers.
pub async fn a_firing_record_never_moves_backwards<S: TaskStore>(store: S) -> Verdict {
    store
        .create_schedule(spec("minutely", "* * * * *")?, at(0))
        .await
        .step("create")?;
    let key = |t: i64| firing_key("minutely", at(t));
    let first = store
        .submit(new_task(&key(60_000)), at(60_000))
        .await
        .step("submit")?;
    let twice = store
        .submit(new_task(&key(60_000)), at(60_001))
        .await
        .step("submit again")?;
    ensure!(
        first.created && !twice.created && first.task.id == twice.task.id,
        "one firing's key makes one task"
    );
    let later = create(&store, new_task(&key(120_000)), at(120_000)).await?;
    let steps = [
        (60_000, first.task.id, true, 60_000, first.task.id),
        (120_000, later.id, true, 120_000, later.id),
        (60_000, first.task.id, false, 120_000, later.id),
        (120_000, first.task.id, false, 120_000, later.id),
    ];
    for (fired_at, task, applies, last, last_task) in steps {
        let applied = store
            .record_firing("minutely".into(), at(fired_at), task)
            .await
            .step("record")?;
        ensure_eq!(applied, applies, "record at {fired_at}");
        let s = store.schedule("minutely".into()).await.step("schedule")?;
        ensure_eq!(
            (s.last_run_at, s.last_task_id),
            (Some(at(last)), Some(last_task)),
            "after recording {fired_at}"
        );
    }
    Ok(())
}

/// A refused firing (its url no longer allowed) is kept as the
/// schedule's `last_error`, field by field, through a pause; an earlier
/// refusal does not replace a later one, a refusal at or before the last
/// firing does not apply; a firing that submits a task clears an error of
/// its time or before, not a later one. Each step: what is recorded, then
/// whether it applies and the record after it.
pub async fn a_refused_firing_is_kept_until_a_later_firing_submits<S: TaskStore>(
    store: S,
) -> Verdict {
    /// Record the error `e` of the firing at `t`, or (`task`) a firing at
    /// `t` that submitted it.
    enum Record {
        Error(i64, &'static str),
        Fired(i64),
    }
    let name = "hourly";
    store
        .create_schedule(spec(name, "@hourly")?, at(0))
        .await
        .step("create")?;
    let task = create(&store, new_task("schedule:hourly:fired"), at(1)).await?;
    let error = |t: i64, message: &str| FiringError {
        code: "url_not_allowed".into(),
        message: message.into(),
        at: at(t),
    };
    let refused = "url: not under any allowed prefix of this server";
    let callback = "callback_url: not under any allowed prefix of this server";
    /// What is recorded, whether it applies, then `last_run_at` and the
    /// last error's (time, message).
    type Step = (Record, bool, Option<i64>, Option<(i64, &'static str)>);
    let steps: [Step; 9] = [
        (Record::Error(60, refused), true, None, Some((60, refused))),
        (
            Record::Error(30, callback),
            false,
            None,
            Some((60, refused)),
        ),
        (
            Record::Error(60, callback),
            true,
            None,
            Some((60, callback)),
        ),
        (Record::Fired(50), true, Some(50), Some((60, callback))),
        (
            Record::Error(120, refused),
            true,
            Some(50),
            Some((120, refused)),
        ),
        (Record::Fired(120), true, Some(120), None),
        (Record::Error(120, refused), false, Some(120), None),
        (
            Record::Error(180, callback),
            true,
            Some(120),
            Some((180, callback)),
        ),
        (Record::Fired(240), true, Some(240), None),
    ];
    for (n, (record, applies, last_run, last_error)) in steps.into_iter().enumerate() {
        let applied = match record {
            Record::Error(t, message) => store
                .record_firing_error(name.into(), error(t, message))
                .await
                .step("record an error")?,
            Record::Fired(t) => store
                .record_firing(name.into(), at(t), task.id)
                .await
                .step("record a firing")?,
        };
        ensure_eq!(applied, applies, "step {n}: applied");
        let s = store.schedule(name.into()).await.step("schedule")?;
        ensure_eq!(
            (s.last_run_at, s.last_error),
            (
                last_run.map(at),
                last_error.map(|(t, message)| error(t, message))
            ),
            "step {n}: the record after it"
        );
        if n == 0 {
            // A pause or a change keeps the error (a firing clears it).
            let paused = store
                .update_schedule(name.into(), ScheduleChange::Paused(true), at(61))
                .await
                .step("pause")?;
            ensure_eq!(paused.last_error, Some(error(60, refused)), "after a pause");
            ensure_eq!(
                store.schedules().await.step("schedules")?[0].last_error,
                Some(error(60, refused)),
                "in the list"
            );
        }
    }
    ensure!(
        !store
            .record_firing_error("nope".into(), error(300, refused))
            .await
            .step("an unknown schedule")?,
        "an error recorded on an unknown schedule applies"
    );
    Ok(())
}
