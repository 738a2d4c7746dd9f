//! Read connections, used from tokio's blocking pool so that no rusqlite call
//! runs on a runtime worker thread.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::Connection;
use tc_model::store::StoreError;
use tokio::sync::Semaphore;

use crate::rows::db;
use crate::schema::{self, Target};

/// At most `size` read connections, opened on demand and kept for reuse.
pub(crate) struct Readers {
    target: Target,
    busy_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

impl Readers {
    pub(crate) fn new(target: Target, busy_timeout: Duration, size: usize) -> Readers {
        Readers {
            target,
            busy_timeout,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(size.max(1)),
        }
    }

    /// Runs `read` on a read connection in the blocking pool.
    pub(crate) async fn run<T, F>(self: &Arc<Self>, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable("store is closed".to_owned()))?;
        let readers = Arc::clone(self);
        tokio::task::spawn_blocking(move || readers.run_blocking(read))
            .await
            .map_err(|e| StoreError::Unavailable(format!("read task failed: {e}")))?
    }

    fn run_blocking<T>(
        &self,
        read: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => schema::open_reader(&self.target, self.busy_timeout).map_err(db)?,
        };
        let result = read(&mut conn);
        // A connection is only put back when healthy: a failed read may have
        // left it in a transaction.
        if result.is_ok() || conn.is_autocommit() {
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conn);
        }
        result
    }
}
