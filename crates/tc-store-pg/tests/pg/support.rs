//! What the PostgreSQL tests share: the test database (or the skip line),
//! a task to submit, and a raw connection for what a store never does
//! (idle transactions, inserts held open, an older node's statements).

use std::time::Duration;

use tc_model::{Limits, NewTask};
use tc_store_pg::testing::TestDatabase;
use tokio_postgres::NoTls;

/// The test database, or `None` after printing why the suite is skipped.
pub(crate) async fn database() -> Option<TestDatabase> {
    match TestDatabase::connect().await {
        Ok(db) => Some(db),
        Err(skip) => {
            #[allow(clippy::print_stdout)]
            {
                println!("{skip}");
            }
            None
        }
    }
}

/// A task to a loopback port nothing listens on, keyed `key`.
pub(crate) fn new_task(key: &str) -> NewTask {
    NewTask::new(
        "http://127.0.0.1:9/x".to_owned(),
        b"{}".to_vec(),
        key.to_owned(),
        3,
        Duration::from_secs(1),
        &Limits::default(),
    )
    .unwrap()
}

/// Ends every task of `claimed` with a success at once, each its own call
/// (as a worker's calls end), and checks each was applied; how many.
pub(crate) async fn succeed_at_once(
    store: &std::sync::Arc<tc_store_pg::PgStore>,
    claimed: Vec<tc_model::Task>,
    now: tc_model::Timestamp,
) -> usize {
    use tc_model::store::{Completion, Guarded, Work};
    let mut ends = tokio::task::JoinSet::new();
    for task in claimed {
        let store = std::sync::Arc::clone(store);
        ends.spawn(async move {
            let success = Completion::Success {
                http_status: 200,
                result: b"{}".to_vec(),
                content_type: None,
            };
            store.complete(task.id, task.attempt, success, now).await
        });
    }
    let answers = ends.join_all().await;
    for answer in &answers {
        assert_eq!(
            answer.as_ref().unwrap(),
            &Guarded::Applied(tc_model::State::Success)
        );
    }
    answers.len()
}

/// One plain connection, outside any store.
pub(crate) struct Raw {
    client: tokio_postgres::Client,
    driver: tokio::task::JoinHandle<()>,
}

impl Raw {
    /// Connects to the test server's `database` (the test database when
    /// `None`), with `schema` as its search path when given, as a session
    /// of this version (its writes to `tasks` pass the fence of schema
    /// step 25; they keep neither the queue nor the counts).
    pub(crate) async fn connect(
        db: &TestDatabase,
        database: Option<&str>,
        schema: Option<&str>,
    ) -> Raw {
        Raw::connect_with(db, database, schema, "-c taskcenter.writes=queued").await
    }

    /// [`Raw::connect`] as a node of an earlier version: no session option,
    /// so the count triggers of schema steps 9 to 24 count its writes and
    /// the fence of step 25 refuses them.
    pub(crate) async fn connect_old(db: &TestDatabase, schema: &str) -> Raw {
        Raw::connect_with(db, None, Some(schema), "").await
    }

    /// [`Raw::connect`] with `options` for the session (a node of another
    /// version says so there).
    pub(crate) async fn connect_as(db: &TestDatabase, schema: &str, options: &str) -> Raw {
        Raw::connect_with(db, None, Some(schema), options).await
    }

    async fn connect_with(
        db: &TestDatabase,
        database: Option<&str>,
        schema: Option<&str>,
        options: &str,
    ) -> Raw {
        let mut config: tokio_postgres::Config = db.url().parse().unwrap();
        if let Some(database) = database {
            config.dbname(database);
        }
        let mut options = options.to_owned();
        if let Some(schema) = schema {
            options.push_str(&format!(" -c search_path={schema}"));
        }
        if !options.trim().is_empty() {
            config.options(options.trim());
        }
        let (client, connection) = config.connect(NoTls).await.unwrap();
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Raw { client, driver }
    }

    /// Runs `sql` (several statements, no parameters); the server's message
    /// on failure.
    pub(crate) async fn execute(&self, sql: &str) -> Result<(), String> {
        self.client
            .batch_execute(sql)
            .await
            .map_err(|e| match e.as_db_error() {
                Some(db) => db.message().to_owned(),
                None => e.to_string(),
            })
    }

    /// The first column of every row `sql` answers.
    pub(crate) async fn column<T>(&self, sql: &str) -> Vec<T>
    where
        T: for<'a> tokio_postgres::types::FromSql<'a>,
    {
        let rows = self.client.query(sql, &[]).await.unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    }

    /// The client, for queries with results.
    pub(crate) fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }

    /// An insert of a pending task keyed `key` as the store writes one
    /// (the position and destination from the schema's defaults).
    pub(crate) fn insert_task_sql(key: &str) -> String {
        format!(
            "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns, \
                                created_at, updated_at, next_run_at) \
             VALUES (uuid_send(gen_random_uuid()), '{key}', 'pending', 'http://127.0.0.1:9/x', \
                     '\\x7b7d', 3, 1000000000, 0, 0, 0)"
        )
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.driver.abort();
    }
}
