//! The arguments of `tc-server topic …`: topics, their
//! subscriptions, publishing and replays, with a tenant's key or the admin
//! token (each works on its own topics).

use clap::{Args, Subcommand};

use super::{Connection, Output, Payload};

/// `tc-server topic …`.
#[derive(Debug, Args)]
pub(crate) struct TopicArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    #[command(flatten)]
    pub(crate) output: Output,
    #[command(subcommand)]
    pub(crate) command: TopicCommand,
}

/// The topic subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
    /// Create a topic or change its settings.
    Put(PutTopicArgs),
    /// List your topics.
    List(PlainArgs),
    /// Show one topic.
    Get(TopicName),
    /// Delete a topic (only without subscriptions).
    Delete(TopicName),
    /// Subscribe a receiver to a topic; prints its id.
    Subscribe(SubscribeArgs),
    /// List a topic's subscriptions with their health.
    Subscriptions(TopicName),
    /// Enable a subscription (again: its failures are forgotten).
    Enable(SubscriptionRef),
    /// Disable a subscription: events make no task for it.
    Disable(SubscriptionRef),
    /// Delete a subscription; its tasks stay.
    Unsubscribe(SubscriptionRef),
    /// Publish an event: one task per matching subscription.
    Publish(PublishArgs),
    /// Show an event with its tasks.
    Event(EventRef),
    /// Send the events since a time again to one subscription.
    Replay(ReplayArgs),
}

/// A command with no argument of its own.
#[derive(Debug, Args)]
pub(crate) struct PlainArgs {
    #[command(flatten)]
    pub(crate) output: Output,
}

/// A command on one topic.
#[derive(Debug, Args)]
pub(crate) struct TopicName {
    /// The topic's name.
    #[arg(value_name = "TOPIC")]
    pub(crate) topic: String,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `topic put`.
#[derive(Debug, Args)]
pub(crate) struct PutTopicArgs {
    /// The topic's name: a-z, 0-9, `_` and `-`.
    #[arg(value_name = "TOPIC")]
    pub(crate) topic: String,
    /// Free text for operators.
    #[arg(long)]
    pub(crate) description: Option<String>,
    /// Where operational events (`subscription.disabled`) are POSTed.
    #[arg(long, value_name = "URL")]
    pub(crate) callback_url: Option<String>,
    /// How long a subscription's calls may all fail before it is disabled
    /// (5 days if left out).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) disable_after_s: Option<u64>,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `topic subscribe`.
#[derive(Debug, Args)]
pub(crate) struct SubscribeArgs {
    /// The topic's name.
    #[arg(value_name = "TOPIC")]
    pub(crate) topic: String,
    /// Where each event is POSTed.
    #[arg(long)]
    pub(crate) url: String,
    /// An event type or pattern (`invoice.*`) it takes; repeat for several
    /// (every event if left out).
    #[arg(long = "event-type", value_name = "TYPE")]
    pub(crate) event_types: Vec<String>,
    /// A header sent with each call, `Name: value`; repeat for several.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub(crate) headers: Vec<String>,
    /// A signing secret (`whsec_…`); twice while rotating.
    #[arg(long = "signing-secret", value_name = "SECRET")]
    pub(crate) signing_secrets: Vec<String>,
    /// Create it disabled.
    #[arg(long)]
    pub(crate) disabled: bool,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// A command on one subscription.
#[derive(Debug, Args)]
pub(crate) struct SubscriptionRef {
    /// The topic's name.
    #[arg(value_name = "TOPIC")]
    pub(crate) topic: String,
    /// The subscription's id.
    #[arg(value_name = "ID")]
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `topic publish`.
#[derive(Debug, Args)]
pub(crate) struct PublishArgs {
    /// The topic's name.
    #[arg(value_name = "TOPIC")]
    pub(crate) topic: String,
    /// The event's type (`invoice.paid`).
    #[arg(long)]
    pub(crate) event_type: String,
    /// The event's JSON body, sent as written, or `@FILE` (`{}` if left
    /// out). (`tc-server topic --json publish …` prints the API's JSON.)
    #[arg(long = "json", value_name = "JSON", value_parser = super::payload)]
    pub(crate) payload: Option<Payload>,
    /// The event's idempotency key: the same event again makes no new task.
    #[arg(long)]
    pub(crate) key: String,
}

/// `topic event`.
#[derive(Debug, Args)]
pub(crate) struct EventRef {
    /// The topic's name.
    #[arg(value_name = "TOPIC")]
    pub(crate) topic: String,
    /// The event's id.
    #[arg(value_name = "ID")]
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) output: Output,
}

/// `topic replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The topic's name.
    #[arg(value_name = "TOPIC")]
    pub(crate) topic: String,
    /// The subscription's id.
    #[arg(value_name = "ID")]
    pub(crate) id: String,
    /// Replay the events created at or after this RFC 3339 time.
    #[arg(long)]
    pub(crate) since: String,
    #[command(flatten)]
    pub(crate) output: Output,
}
