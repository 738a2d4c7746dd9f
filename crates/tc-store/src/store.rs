//! [`SqliteStore`]: the writer thread and the read pool. The store port
//! ([`TaskStore`](tc_model::store::TaskStore)) is implemented part by
//! part, one file each under `store/`, each method handing its work to one
//! of them.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{Semaphore, mpsc};

use crate::read_pool::Readers;

use crate::writer;

mod destinations;
mod flow_keys;
mod lifecycle;
mod schedules;
mod tasks;
mod tenants;
mod topics;
mod work;

/// The SQLite adapter behind [`TaskStore`](tc_model::store::TaskStore).
///
/// Writes go to one writer thread that commits them in batches; reads run on
/// a small pool of their own connections in tokio's blocking pool. Needs a
/// tokio runtime. Close it with [`SqliteStore::close`]; dropping it also
/// flushes queued writes and joins the writer, but blocks the dropping thread
/// while it does.
pub struct SqliteStore {
    commands: Option<mpsc::Sender<writer::Command>>,
    /// One permit per payload byte queued for the writer.
    queued_bytes: Arc<Semaphore>,
    max_queued_bytes: usize,
    writer: Option<JoinHandle<()>>,
    readers: Arc<Readers>,
    /// `StoreConfig::callback_result_bytes`, for the writes that end tasks.
    callback_bytes: usize,
    /// Seals the secret columns on their way in and opens them on their
    /// way out ([`SqliteStore::seal_with`]); none until then.
    sealer: tc_seal::Sealer,
    /// Token buckets and destination holds: one process
    /// opens the file, so they are this process's, in memory.
    cluster: Arc<std::sync::Mutex<tc_model::cluster::local::LocalCluster>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StoreConfig;
    use tc_model::store::{StoreError, Tasks};

    #[tokio::test]
    async fn health_fails_once_the_writer_thread_is_gone() {
        let store = SqliteStore::open_in_memory(StoreConfig::default())
            .await
            .unwrap();
        assert_eq!(store.health().await, Ok(()));
        // What a bug in a write does to the writer: it ends the thread.
        let crashed = store
            .write(|_| -> Result<(), StoreError> { panic!("a write that panics") })
            .await;
        assert!(crashed.is_err(), "{crashed:?}");
        match store.health().await {
            Err(StoreError::Unavailable(reason)) => {
                assert!(reason.contains("writer"), "{reason}")
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
    }
}
