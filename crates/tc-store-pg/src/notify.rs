//! LISTEN/NOTIFY between nodes: a submit on one node wakes idle workers on
//! the others, a cancel on one node stops the call running on another.
//!
//! Cancels are announced inside the cancel's own transaction (delivered on
//! commit, never for a cancel that rolled back). Submit wake-ups are
//! announced after commit by one task per store, coalesced: submits that
//! arrive while a NOTIFY is on its way, or within [`WAKE_GAP`] of the last
//! one, share the next one, so a steady stream of submits costs a node at
//! most one notification per gap, not one per grouped insert (every NOTIFY
//! is a transaction of its own, takes a cluster-wide lock at commit, and
//! wakes every other node's claim loop).
//!
//! A wake-up names the node that sent it, and a node ignores its own: its
//! worker was told of its own submits in-process already, and the echo
//! cost one more claim that found nothing.
//!
//! A notification can be lost (the listener's connection dropped); the
//! worker's poll interval and its heartbeat, which finds tasks canceled
//! elsewhere, are the fallback. After (re)connecting the listener sends a
//! [`PgEvent::Wake`], since anything may have been missed.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

/// The least time between two wake-up notifications of one node: submits
/// within it share the next one. Another node learns of a submit at most
/// this late; this node's worker is told at once, in-process.
pub(crate) const WAKE_GAP: Duration = Duration::from_millis(20);

use deadpool_postgres::Pool;
use tc_model::TaskId;
use tokio::sync::{Notify, broadcast, watch};
use tokio_postgres::AsyncMessage;

use crate::error::describe;

/// What another node (or this one) announced through the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgEvent {
    /// Tasks were submitted, or notifications may have been missed: claim now.
    Wake,
    /// This task was canceled while running: stop its call if it runs here.
    Canceled(TaskId),
}

/// The channel names of one schema: nodes on different schemas of one
/// database (tests) never hear each other.
#[derive(Debug, Clone)]
pub(crate) struct Channels {
    pub(crate) wake: String,
    pub(crate) cancel: String,
    /// This node's name in its wake-ups' payload (random per store).
    pub(crate) node: String,
}

impl Channels {
    pub(crate) fn for_schema(schema: &str) -> Channels {
        Channels {
            wake: format!("tc_wake.{schema}"),
            cancel: format!("tc_cancel.{schema}"),
            node: format!("{:016x}", fastrand::u64(..)),
        }
    }
}

/// Listens on both channels until `stop` changes or its sender is gone,
/// reconnecting after `retry` when the connection is lost.
pub(crate) async fn listen(
    config: tokio_postgres::Config,
    tls: crate::tls::Tls,
    channels: Channels,
    events: broadcast::Sender<PgEvent>,
    mut stop: watch::Receiver<bool>,
    retry: Duration,
) {
    loop {
        let session = listen_once(&config, &tls, &channels, &events);
        tokio::select! {
            ended = session => {
                if let Err(message) = ended {
                    tracing::warn!(error = %message, "store_listen_lost");
                }
            }
            _ = stop.changed() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(retry) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One listening connection, until it ends.
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: &crate::tls::Tls,
    channels: &Channels,
    events: &broadcast::Sender<PgEvent>,
) -> Result<(), String> {
    let (client, mut connection) = config
        .connect(tls.clone())
        .await
        .map_err(|e| format!("connect: {}", describe(&e)))?;
    let (ready, ended) = tokio::sync::oneshot::channel();
    let forward = {
        let events = events.clone();
        let channels = channels.clone();
        tokio::spawn(async move {
            // The connection must be polled for the client's queries to
            // progress; notifications arrive as its async messages.
            let end = loop {
                match poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        if let Some(event) = parse(&channels, n.channel(), n.payload()) {
                            let _ = events.send(event);
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break Err(describe(&e)),
                    None => break Ok(()),
                }
            };
            let _ = ready.send(end);
        })
    };
    let listening = client
        .batch_execute(&format!(
            "LISTEN {}; LISTEN {}",
            quote(&channels.wake),
            quote(&channels.cancel)
        ))
        .await;
    if let Err(e) = listening {
        forward.abort();
        return Err(format!("LISTEN: {}", describe(&e)));
    }
    tracing::debug!(wake = %channels.wake, cancel = %channels.cancel, "store_listening");
    let _ = events.send(PgEvent::Wake);
    let end = ended
        .await
        .unwrap_or_else(|_| Err("listener task ended".to_owned()));
    drop(client);
    end.and(Err("connection closed".to_owned()))
}

fn parse(channels: &Channels, channel: &str, payload: &str) -> Option<PgEvent> {
    if channel == channels.wake {
        // Our own echo (an older node's wake-up names no node: heard).
        (payload != channels.node).then_some(PgEvent::Wake)
    } else if channel == channels.cancel {
        payload.parse().ok().map(PgEvent::Canceled)
    } else {
        None
    }
}

/// A channel name as a quoted identifier.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Sends one wake-up NOTIFY, naming `channels.node`, per burst of
/// `pending` signals, at most one per [`WAKE_GAP`], until `stop`.
pub(crate) async fn announce_submits(
    pool: Pool,
    channels: Channels,
    pending: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = pending.notified() => {}
            _ = stop.changed() => return,
        }
        let sent = async {
            let client = pool.get().await.map_err(|e| e.to_string())?;
            client
                .execute(
                    "SELECT pg_notify($1, $2)",
                    &[&channels.wake, &channels.node],
                )
                .await
                .map_err(|e| describe(&e))
        };
        if let Err(error) = sent.await {
            // Other nodes find the task at their next poll.
            tracing::warn!(error = %error, "store_wake_notify_failed");
        }
        // Submits meanwhile leave one signal, answered after the gap.
        tokio::select! {
            () = tokio::time::sleep(WAKE_GAP) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_are_read_per_channel() {
        let channels = Channels::for_schema("s1");
        let own = channels.node.clone();
        let id = TaskId::new(tc_model::Timestamp::from_millis(1), [7; 10]);
        let check = |channel: &str, payload: &str, want: Option<PgEvent>| {
            assert_eq!(
                parse(&channels, channel, payload),
                want,
                "{channel} {payload}"
            );
        };
        check("tc_wake.s1", "", Some(PgEvent::Wake));
        check("tc_wake.s1", "0123456789abcdef", Some(PgEvent::Wake));
        check("tc_wake.s1", &own, None);
        check("tc_cancel.s1", &id.to_string(), Some(PgEvent::Canceled(id)));
        check("tc_cancel.s1", "not an id", None);
        check("tc_wake.s2", "", None);
        check("tc_cancel.s2", &id.to_string(), None);
    }

    #[test]
    fn channel_names_are_quoted_identifiers() {
        assert_eq!(quote("tc_wake.public"), "\"tc_wake.public\"");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
    }
}
