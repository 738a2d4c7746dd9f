//! A submission: [`NewTask`] built only through validation, field by field,
//! against the API's [`Limits`]; each [`ValidationError`] names its field.

use crate::callback::asked::Callback;
use crate::headers::Headers;
use crate::validation::{Limits, ValidationError, check_url};
use crate::{FirstRun, Method, State, Task, TaskId, Timestamp};
use std::time::Duration;

/// A valid submission: "call `url` with `method`, these `headers` and
/// `body`, at most `max_attempts` times, each try within `timeout`", due
/// as its [`FirstRun`] says. One that exists has passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    pub(crate) url: String,
    pub(crate) body: Vec<u8>,
    pub(crate) idempotency_key: String,
    pub(crate) max_attempts: u32,
    pub(crate) timeout: Duration,
    pub(crate) first_run: FirstRun,
    pub(crate) method: Method,
    pub(crate) headers: Headers,
    pub(crate) trace: Option<crate::TraceContext>,
    /// Where to POST its view when it ends ([`crate::callback`]).
    pub(crate) callback: Option<Callback>,
    /// The task this one is the callback of (set by the server only).
    pub(crate) callback_of: Option<crate::TaskId>,
    /// The tenant it belongs to ([`crate::tenant`]); `None`: the admin's.
    /// Part of its identity: the idempotency key is unique per tenant.
    pub(crate) tenant: Option<String>,
    /// The submitting tenant's `max_pending` at submit time: the store
    /// refuses the submit ([`crate::store::StoreError::QuotaExceeded`]) when
    /// the tenant has that many tasks not yet terminal. Not stored.
    pub(crate) pending_limit: Option<u64>,
    /// Higher first within its destination ([`crate::priority`]); 0 to 9.
    pub(crate) priority: u8,
    /// Its flow key ([`crate::flow_key`]): limits and a fair share of its
    /// own, its tenant's.
    pub(crate) flow_key: Option<String>,
    /// The id of the tenant's key it is submitted with: the store refuses
    /// the submit ([`crate::store::StoreError::CredentialGone`]) when the
    /// key was revoked or the tenant deleted before it commits. Not stored,
    /// not part of the work.
    pub(crate) key_id: Option<String>,
    /// The event and subscription it is a task of (set by tc-model's
    /// topics only, [`crate::topic::event::NewEvent::task_for`]).
    pub(crate) topic: Option<crate::topic::TopicLink>,
}

impl NewTask {
    /// Checks every field and builds the submission, or names the first field
    /// that is wrong.
    pub fn new(
        url: String,
        body: Vec<u8>,
        idempotency_key: String,
        max_attempts: u32,
        timeout: Duration,
        limits: &Limits,
    ) -> Result<NewTask, ValidationError> {
        check_url(&url)?;
        check_key(&idempotency_key)?;
        if !(1..=Limits::MAX_ATTEMPTS).contains(&max_attempts) {
            return Err(ValidationError::MaxAttempts { got: max_attempts });
        }
        if body.len() > limits.max_body_bytes {
            return Err(ValidationError::Body {
                got: body.len(),
                limit: limits.max_body_bytes,
            });
        }
        if !(Limits::MIN_TIMEOUT..=Limits::MAX_TIMEOUT).contains(&timeout) {
            return Err(ValidationError::Timeout {
                got_ms: timeout.as_millis(),
            });
        }
        Ok(NewTask {
            url,
            body,
            idempotency_key,
            max_attempts,
            timeout,
            first_run: FirstRun::Now,
            method: Method::Post,
            headers: Headers::default(),
            trace: None,
            callback: None,
            callback_of: None,
            tenant: None,
            pending_limit: None,
            key_id: None,
            topic: None,
            priority: 0,
            flow_key: None,
        })
    }

    /// The same submission under the flow key `key` (none by default):
    /// 1 to [`crate::flow_key::MAX_KEY_BYTES`] printable ASCII characters.
    pub fn with_flow_key(mut self, key: Option<String>) -> Result<NewTask, ValidationError> {
        if let Some(key) = &key
            && let Some(problem) = crate::flow_key::key_problem(key)
        {
            return Err(ValidationError::FlowKey(problem));
        }
        self.flow_key = key;
        Ok(self)
    }

    /// Its flow key.
    pub fn flow_key(&self) -> Option<&str> {
        self.flow_key.as_deref()
    }

    /// The same submission at `priority` (0 by default, at most
    /// [`crate::priority::MAX_PRIORITY`]).
    pub fn with_priority(mut self, priority: u8) -> Result<NewTask, ValidationError> {
        if priority > crate::priority::MAX_PRIORITY {
            return Err(ValidationError::Priority { got: priority });
        }
        self.priority = priority;
        Ok(self)
    }

    /// Its priority.
    pub fn priority(&self) -> u8 {
        self.priority
    }

    /// The same submission for `tenant` (none by default), under its
    /// pending limit at submit time.
    pub fn with_tenant(mut self, tenant: Option<String>, pending_limit: Option<u64>) -> NewTask {
        self.tenant = tenant;
        self.pending_limit = pending_limit;
        self
    }

    /// The same submission made with the tenant's key `key_id`
    /// ([`crate::tenant::Acting`]).
    pub fn with_key(mut self, key_id: String) -> NewTask {
        self.key_id = Some(key_id);
        self
    }

    /// The id of the tenant's key it is made with, if any.
    pub fn key_id(&self) -> Option<&str> {
        self.key_id.as_deref()
    }

    /// The tenant's key it is made with, with its tenant, if any.
    pub fn acting(&self) -> Option<crate::tenant::Acting> {
        match (&self.tenant, &self.key_id) {
            (Some(tenant), Some(key)) => Some(crate::tenant::Acting::new(tenant, key)),
            _ => None,
        }
    }

    /// The event and subscription it is a task of, if any.
    pub fn topic_link(&self) -> Option<&crate::topic::TopicLink> {
        self.topic.as_ref()
    }

    /// The tenant it belongs to.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// The pending limit the store enforces on this submit.
    pub fn pending_limit(&self) -> Option<u64> {
        self.pending_limit
    }

    /// The same submission with a callback (none by default): part of the
    /// work, so a resubmit must repeat it.
    pub fn with_callback(mut self, callback: Callback) -> NewTask {
        self.callback = Some(callback);
        self
    }

    /// The callback it asks for, if any.
    pub fn callback(&self) -> Option<&Callback> {
        self.callback.as_ref()
    }

    /// The task this one is the callback of, if it is one.
    pub fn callback_of(&self) -> Option<crate::TaskId> {
        self.callback_of
    }

    /// The same submission with another method (`POST` by default). A
    /// `GET` sends no body: one with a body is refused (naming `body`).
    pub fn with_method(mut self, method: Method) -> Result<NewTask, ValidationError> {
        if method == Method::Get && !self.body.is_empty() {
            return Err(ValidationError::BodyNotSent { method });
        }
        self.method = method;
        Ok(self)
    }

    /// The same submission with headers of its own (none by default).
    pub fn with_headers(mut self, headers: Headers) -> NewTask {
        self.headers = headers;
        self
    }

    /// The same submission in a trace (the submitting request's context,
    /// or a new trace). Not part of the work: a resubmit in another trace
    /// is the same task.
    pub fn with_trace(mut self, trace: crate::TraceContext) -> NewTask {
        self.trace = Some(trace);
        self
    }

    /// The same submission under another key (checked), outside any trace:
    /// a schedule's firing of its template.
    pub(crate) fn rekeyed(mut self, key: String) -> Result<NewTask, ValidationError> {
        check_key(&key)?;
        self.idempotency_key = key;
        self.trace = None;
        Ok(self)
    }

    /// The trace the task belongs to, if it was given one.
    pub fn trace(&self) -> Option<&crate::TraceContext> {
        self.trace.as_ref()
    }

    /// The call's method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The task's own headers.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The same submission, first due as `first_run` says. A delay over
    /// [`FirstRun::MAX_AHEAD`] is refused; how far ahead an absolute time
    /// lies depends on the clock, which the caller checks.
    pub fn with_first_run(mut self, first_run: FirstRun) -> Result<NewTask, ValidationError> {
        if let FirstRun::After(delay) = first_run
            && delay > FirstRun::MAX_AHEAD
        {
            return Err(ValidationError::Delay {
                got_ms: delay.as_millis(),
            });
        }
        self.first_run = first_run;
        Ok(self)
    }

    /// When it first becomes due.
    pub fn first_run(&self) -> FirstRun {
        self.first_run
    }

    /// Where the task POSTs.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What it POSTs.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The client's idempotency key.
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }

    /// The most tries.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The per-try timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether `other` asks for the same work: the fields an idempotent
    /// resubmit must repeat (everything but the key itself). Bodies are
    /// compared as JSON values when both are JSON, so that a resubmit that
    /// orders keys differently or spaces them otherwise is the same work;
    /// numbers compare by their digits as written.
    pub fn same_payload(
        &self,
        url: &str,
        body: &[u8],
        max_attempts: u32,
        timeout: Duration,
    ) -> bool {
        self.url == url
            && same_json(&self.body, body)
            && self.max_attempts == max_attempts
            && self.timeout == timeout
    }

    /// [`NewTask::same_payload`] against a stored task, its schedule,
    /// method, headers and callback included.
    pub fn same_work_as(&self, task: &crate::Task) -> bool {
        self.differing_fields(task).is_empty()
    }

    /// The fields, by their API names, in which this submit asks for other
    /// work than the stored `task` (what an idempotency conflict names), in
    /// the order a submit's body lists them; empty: the same work. A
    /// schedule that differs is named by both sides' kinds (`run_at`,
    /// `delay_ms`; none for "now").
    pub fn differing_fields(&self, task: &crate::Task) -> Vec<&'static str> {
        let mut fields = Vec::new();
        let mut differ = |differs: bool, name: &'static str| {
            if differs && !fields.contains(&name) {
                fields.push(name);
            }
        };
        differ(self.method != task.method, "method");
        differ(self.url != task.url, "url");
        differ(self.headers != task.headers, "headers");
        differ(!same_json(&self.body, &task.body), "json");
        differ(self.max_attempts != task.max_attempts, "max_attempts");
        differ(self.timeout != task.timeout, "timeout_ms");
        differ(self.priority != task.priority, "priority");
        differ(self.flow_key != task.flow_key, "flow_key");
        if self.first_run != task.first_run {
            for asked in [self.first_run, task.first_run] {
                match asked {
                    FirstRun::Now => {}
                    FirstRun::At(_) => differ(true, "run_at"),
                    FirstRun::After(_) => differ(true, "delay_ms"),
                }
            }
        }
        let url = |c: &Option<crate::callback::Callback>| c.as_ref().map(|c| c.url().to_owned());
        let on =
            |c: &Option<crate::callback::Callback>| c.as_ref().map(crate::callback::Callback::on);
        differ(url(&self.callback) != url(&task.callback), "callback_url");
        differ(on(&self.callback) != on(&task.callback), "callback_on");
        // Only the store makes callback tasks: a user's submit never
        // collides with one but through its key.
        differ(self.callback_of != task.callback_of, "callback_of");
        fields
    }
}

impl Task {
    /// The task a store creates for `new` at `now`: pending, due when its
    /// schedule says, no try yet. Every adapter builds its new rows from this one reading.
    pub fn submitted(id: TaskId, new: &NewTask, now: Timestamp) -> Task {
        Task {
            id,
            state: State::Pending,
            url: new.url().to_owned(),
            method: new.method(),
            headers: new.headers().clone(),
            destination: crate::destination_of(new.url()),
            body: new.body().to_vec(),
            idempotency_key: new.idempotency_key().to_owned(),
            attempt: 0,
            attempts_before_retry: 0,
            max_attempts: new.max_attempts(),
            timeout: new.timeout(),
            first_run: new.first_run(),
            http_status: None,
            result: None,
            result_content_type: None,
            error: None,
            created_at: now,
            updated_at: now,
            started_at: None,
            finished_at: None,
            next_run_at: Some(new.first_run().due_at(now)),
            lease_until: None,
            attempts: Vec::new(),
            trace: new.trace().cloned(),
            callback: new.callback().cloned(),
            callback_of: new.callback_of(),
            callback_task_id: None,
            ends: 0,
            tenant: new.tenant().map(str::to_owned),
            topic: new.topic_link().cloned(),
            priority: new.priority(),
            flow_key: new.flow_key.clone(),
        }
    }
}

/// Equal bytes, or equal JSON values (object keys in any order, any
/// insignificant whitespace).
pub(crate) fn same_json(a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    match (
        serde_json::from_slice::<serde_json::Value>(a),
        serde_json::from_slice::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

pub(crate) fn check_key(key: &str) -> Result<(), ValidationError> {
    if key.is_empty() {
        return Err(ValidationError::IdempotencyKey("must not be empty".into()));
    }
    if key.len() > Limits::MAX_KEY_BYTES {
        return Err(ValidationError::IdempotencyKey(format!(
            "{} bytes is over the limit of {} bytes",
            key.len(),
            Limits::MAX_KEY_BYTES
        )));
    }
    // Every try sends the key as the Idempotency-Key header: a byte outside
    // visible ASCII cannot go in one, and a receiver trims the spaces
    // around a header's value, so " k" would reach it as "k".
    if !key.bytes().all(|b| matches!(b, b' '..=b'~')) {
        return Err(ValidationError::IdempotencyKey(
            "must be printable ASCII (space to `~`): it is sent as the Idempotency-Key header"
                .into(),
        ));
    }
    if key.starts_with(' ') || key.ends_with(' ') {
        return Err(ValidationError::IdempotencyKey(
            "must not start or end with a space: it is sent as the Idempotency-Key header".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_names_the_fields_that_differ() {
        use crate::callback::{Callback, CallbackOn};
        let base = || {
            NewTask::new(
                "http://a.test/hook".into(),
                br#"{"a":1,"b":2}"#.to_vec(),
                "k".into(),
                3,
                Duration::from_secs(5),
                &Limits::default(),
            )
            .unwrap()
        };
        let on = |names: &[&str]| CallbackOn::parse(names.iter().copied()).unwrap();
        let callback = |url: &str, names: &[&str]| Callback::new(url.into(), on(names)).unwrap();
        let headers =
            |value: &str| Headers::from_stored(Some(&format!(r#"{{"x-a":"{value}"}}"#))).unwrap();
        let at = crate::Timestamp::from_millis(1_000);
        let stored = {
            let new = base()
                .with_headers(headers("1"))
                .with_callback(callback("http://c.test/cb", &["success"]));
            crate::Task::submitted(crate::TaskId::new(at, [1; 10]), &new, at)
        };
        let check = |new: NewTask, expected: &[&str]| {
            assert_eq!(new.differing_fields(&stored), expected);
            assert_eq!(new.same_work_as(&stored), expected.is_empty());
        };
        let same = || {
            base()
                .with_headers(headers("1"))
                .with_callback(callback("http://c.test/cb", &["success"]))
        };
        check(same(), &[]);
        // JSON compares as values: key order and spacing are the same work.
        check(
            NewTask {
                body: br#"{ "b":2, "a":1 }"#.to_vec(),
                ..same()
            },
            &[],
        );
        check(same().with_method(Method::Put).unwrap(), &["method"]);
        check(
            NewTask {
                url: "http://a.test/other".into(),
                ..same()
            },
            &["url"],
        );
        check(same().with_headers(headers("2")), &["headers"]);
        check(
            NewTask {
                body: br#"{"a":2,"b":2}"#.to_vec(),
                max_attempts: 4,
                timeout: Duration::from_secs(6),
                ..same()
            },
            &["json", "max_attempts", "timeout_ms"],
        );
        check(
            same().with_first_run(FirstRun::At(at)).unwrap(),
            &["run_at"],
        );
        check(
            same()
                .with_first_run(FirstRun::After(Duration::from_secs(1)))
                .unwrap(),
            &["delay_ms"],
        );
        check(
            same().with_callback(callback("http://c.test/other", &["success"])),
            &["callback_url"],
        );
        check(
            same().with_callback(callback("http://c.test/cb", &["failed"])),
            &["callback_on"],
        );
        check(
            base().with_headers(headers("1")),
            &["callback_url", "callback_on"],
        );
    }

    struct Input {
        url: String,
        body: Vec<u8>,
        key: String,
        max_attempts: u32,
        timeout: Duration,
    }

    fn valid() -> Input {
        Input {
            url: "http://127.0.0.1:9000/hook".into(),
            body: b"{}".to_vec(),
            key: "order-1".into(),
            max_attempts: 3,
            timeout: Duration::from_secs(5),
        }
    }

    /// Applies `edit` to a valid input and checks the outcome: `None` means
    /// valid, `Some(field)` means refused naming that field.
    fn check(edit: impl FnOnce(&mut Input), limits: Limits, expected: Option<&str>) {
        let mut input = valid();
        edit(&mut input);
        let got = NewTask::new(
            input.url,
            input.body,
            input.key,
            input.max_attempts,
            input.timeout,
            &limits,
        );
        match (got, expected) {
            (Ok(_), None) => {}
            (Err(e), Some(field)) => {
                assert_eq!(e.field(), field, "{e}");
                assert!(
                    e.to_string().starts_with(field),
                    "message names the field: {e}"
                );
            }
            (got, expected) => panic!("expected {expected:?}, got {got:?}"),
        }
    }

    #[test]
    fn url_rules() {
        let d = Limits::default();
        let host = "http://h/";
        let at_limit = format!("{host}{}", "a".repeat(Limits::MAX_URL_BYTES - host.len()));
        let over = format!("{at_limit}a");
        check(|i| i.url = at_limit, d, None);
        check(|i| i.url = over, d, Some("url"));
        check(|i| i.url = "https://example.com".into(), d, None);
        check(|i| i.url = "http://[::1]:8080/x?y=1".into(), d, None);
        for bad in [
            "",
            "/relative",
            "example.com/x",
            "ftp://example.com/",
            "http://",
            "http:///x",
            "http://h:99999/",
            "http://h:0/",
            "http://user@h/",
            "http://user:pw@h/",
            "http://h:/",
            "http://[::1]:70000/",
            "not a url",
            "mailto:a@b",
            "https://b.test/hooks/../admin",
            "https://b.test/hooks/%2e%2E/admin",
            "https://b.test/hooks/./x",
            "https://b.test/hooks/..",
            // A host must be one a destination can name (`GET
            // /destinations/{destination}`, the list's filter).
            "http://a~b/",
            "http://a!b/",
            "http://[v1.x]/",
            "http://[zz]/",
            "http://[::1%25eth0]/",
            &format!("http://{}/", "h".repeat(254)),
            // Ends in a number, so an IPv4 address by the WHATWG URL
            // standard, and not a valid one: no destination.
            "http://1.2.3.4.5/",
            "http://4294967296/",
            "http://999.1.1.1/",
        ] {
            check(|i| i.url = bad.into(), d, Some("url"));
        }
        for good in [
            "http://[::ffff:1.2.3.4]:8080/",
            "HTTP://A_b.c-D:080/x",
            "http://127.1:9/",
            "http://0x7f.0.0.1:9/",
            "http://LOCALHOST.:9/",
            &format!("http://{}/", "h".repeat(253)),
        ] {
            check(|i| i.url = good.into(), d, None);
        }
    }

    /// A task's destination is one the destination routes and filters
    /// take: every url a submit accepts names one.
    #[test]
    fn accepted_urls_have_a_destination_that_parses() {
        let hosts = [
            "h",
            "H.example",
            "a_b",
            "a~b",
            "a!b",
            "a$b",
            "[::1]",
            "[::ffff:1.2.3.4]",
            "[v1.x]",
            "[zz]",
            "[::1%25eth0]",
            "127.0.0.1",
            "999.1.1.1",
            "a'b",
            "a(b)",
            "a*b",
            "a+b",
            "a,b",
            "a;b",
            "a=b",
            "a&b",
        ];
        for host in hosts {
            for port in ["", ":1", ":080", ":65535"] {
                let url = format!("http://{host}{port}/x");
                if check_url(&url).is_ok() {
                    let destination = crate::url::destination_of(&url);
                    assert_eq!(
                        crate::destination::parse_destination(&destination).as_deref(),
                        Ok(destination.as_str()),
                        "{url}"
                    );
                }
            }
        }
    }

    #[test]
    fn idempotency_key_rules() {
        let d = Limits::default();
        check(|i| i.key = "k".into(), d, None);
        check(|i| i.key = "k".repeat(255), d, None);
        check(|i| i.key = "k".repeat(256), d, Some("idempotency_key"));
        check(|i| i.key = String::new(), d, Some("idempotency_key"));
        check(|i| i.key = "a\nb".into(), d, Some("idempotency_key"));
        check(|i| i.key = "a\u{7f}".into(), d, Some("idempotency_key"));
        check(|i| i.key = "a b ~!#".into(), d, None);
        // The key travels as the Idempotency-Key header, unchanged: no
        // byte outside visible ASCII, no space a receiver would trim.
        check(|i| i.key = "naïve-ключ".into(), d, Some("idempotency_key"));
        check(|i| i.key = " k".into(), d, Some("idempotency_key"));
        check(|i| i.key = "k ".into(), d, Some("idempotency_key"));
        check(|i| i.key = " ".into(), d, Some("idempotency_key"));
    }

    /// Every key a submit accepts reaches the downstream as itself: a valid
    /// header value that a receiver reads back unchanged (it trims spaces).
    #[test]
    fn accepted_keys_are_sent_as_they_are() {
        let chars = (0u32..0x300)
            .filter_map(char::from_u32)
            .chain(['к', '€', '\u{2028}']);
        for c in chars {
            for key in [
                format!("{c}"),
                format!("a{c}b"),
                format!("{c}b"),
                format!("a{c}"),
            ] {
                let i = valid();
                let accepted = NewTask::new(
                    i.url,
                    i.body,
                    key.clone(),
                    i.max_attempts,
                    i.timeout,
                    &Limits::default(),
                )
                .is_ok();
                let sent_as_is = http::HeaderValue::from_str(&key)
                    .is_ok_and(|v| v.to_str().is_ok_and(|s| s.trim_matches([' ', '\t']) == key));
                assert!(
                    !accepted || sent_as_is,
                    "{key:?} is accepted but cannot be sent"
                );
            }
        }
    }

    #[test]
    fn max_attempts_rules() {
        let d = Limits::default();
        check(|i| i.max_attempts = 0, d, Some("max_attempts"));
        check(|i| i.max_attempts = 1, d, None);
        check(|i| i.max_attempts = 100, d, None);
        check(|i| i.max_attempts = 101, d, Some("max_attempts"));
    }

    #[test]
    fn body_rules() {
        let small = Limits { max_body_bytes: 10 };
        check(|i| i.body = vec![b' '; 10], small, None);
        check(|i| i.body = vec![b' '; 11], small, Some("body"));
        let d = Limits::default();
        check(|i| i.body = vec![b' '; 1024 * 1024], d, None);
        check(|i| i.body = vec![b' '; 1024 * 1024 + 1], d, Some("body"));
    }

    #[test]
    fn timeout_rules() {
        let d = Limits::default();
        check(|i| i.timeout = Duration::ZERO, d, Some("timeout"));
        check(
            |i| i.timeout = Duration::from_micros(999),
            d,
            Some("timeout"),
        );
        check(|i| i.timeout = Duration::from_millis(1), d, None);
        check(|i| i.timeout = Duration::from_millis(600_000), d, None);
        check(
            |i| i.timeout = Duration::from_millis(600_001),
            d,
            Some("timeout"),
        );
    }

    #[test]
    fn a_get_sends_no_body() {
        let task = |body: &[u8]| {
            NewTask::new(
                "http://h/x".into(),
                body.to_vec(),
                "k".into(),
                1,
                Duration::from_secs(1),
                &Limits::default(),
            )
            .unwrap()
        };
        assert_eq!(
            task(b"").with_method(Method::Get).map(|t| t.method()),
            Ok(Method::Get)
        );
        let refused = task(b"{}").with_method(Method::Get).unwrap_err();
        assert_eq!(refused.field(), "body");
        assert_eq!(refused.to_string(), "body: a GET sends no body");
        for method in [Method::Post, Method::Put, Method::Patch, Method::Delete] {
            assert_eq!(
                task(b"{}").with_method(method).map(|t| t.method()),
                Ok(method)
            );
            assert_eq!(
                task(b"").with_method(method).map(|t| t.method()),
                Ok(method)
            );
        }
        assert_eq!(task(b"{}").method(), Method::Post, "POST by default");
    }

    #[test]
    fn a_resubmit_must_repeat_the_method_and_the_headers() {
        let i = valid();
        let new = NewTask::new(
            i.url,
            i.body,
            i.key,
            i.max_attempts,
            i.timeout,
            &Limits::default(),
        )
        .unwrap();
        let stored = crate::Task::submitted(
            crate::TaskId::new(Timestamp::from_millis(0), [0; 10]),
            &new,
            Timestamp::from_millis(0),
        );
        assert!(new.same_work_as(&stored));
        let put = new.clone().with_method(Method::Put).unwrap();
        assert!(!put.same_work_as(&stored), "another method");
        let headers =
            |value: &str| Headers::parse([("X-Tenant".to_owned(), value.to_owned())]).unwrap();
        let with = new.clone().with_headers(headers("acme"));
        assert!(!with.same_work_as(&stored), "headers where there were none");
        let stored = crate::Task::submitted(stored.id, &with, stored.created_at);
        assert!(
            new.clone()
                .with_headers(headers("acme"))
                .same_work_as(&stored)
        );
        assert!(!new.with_headers(headers("other")).same_work_as(&stored));
    }

    #[test]
    fn bodies_compare_as_json_values() {
        let check = |a: &str, b: &str, same: bool| {
            assert_eq!(same_json(a.as_bytes(), b.as_bytes()), same, "{a} vs {b}");
        };
        check(r#"{"b":1,"a":[1,2]}"#, r#"{ "a" : [1, 2], "b" : 1 }"#, true);
        check(r#"{"a":{"y":1,"x":2}}"#, r#"{"a":{"x":2,"y":1}}"#, true);
        check(r#"{"a":[1,2]}"#, r#"{"a":[2,1]}"#, false);
        check(
            r#"{"n":123456789012345678901234567890}"#,
            r#"{"n":123456789012345678901234567891}"#,
            false,
        );
        check(r#"{"n":1.0}"#, r#"{"n":1}"#, false);
        check(r#"{"a":1}"#, r#"{"a":1,"b":null}"#, false);
        check("not json", "not json", true);
        check("not json", "not  json", false);
    }

    #[test]
    fn same_payload_compares_everything_but_the_key() {
        let i = valid();
        let task = NewTask::new(
            i.url.clone(),
            i.body.clone(),
            i.key,
            i.max_attempts,
            i.timeout,
            &Limits::default(),
        )
        .unwrap();
        assert!(task.same_payload(&i.url, &i.body, 3, i.timeout));
        assert!(!task.same_payload("http://other/", &i.body, 3, i.timeout));
        assert!(!task.same_payload(&i.url, b"[]", 3, i.timeout));
        assert!(!task.same_payload(&i.url, b"not json", 3, i.timeout));
        assert!(!task.same_payload(&i.url, &i.body, 4, i.timeout));
        assert!(!task.same_payload(&i.url, &i.body, 3, Duration::from_secs(6)));
    }
}
