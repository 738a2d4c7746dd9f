//! The store calls that make a destination's limits hold across the
//! cluster: a claim's token grants and what it gives
//! back, and the holds shared and adopted. What to ask and what an answer
//! does is the flow's ([`crate::flow`]); a store that fails here costs
//! this claim its rated destinations (no grant, no call), never a call
//! beyond the rate.

use tc_model::Timestamp;
use tc_model::cluster::TokenAsk;
use tc_model::store::TaskStore;

use crate::shared::Shared;

/// Takes the grants a claim of up to `wanted` tasks needs; returns the
/// asks, which [`give_back`] settles after the claim.
pub(crate) async fn take_grants<S: TaskStore>(
    shared: &Shared<S>,
    now: Timestamp,
    wanted: usize,
) -> Vec<TokenAsk> {
    let asks = shared.flow.token_asks(now, wanted);
    if asks.is_empty() {
        return asks;
    }
    match shared.store.take_tokens(asks.clone(), now).await {
        Ok(grants) => shared.flow.granted(&asks, &grants, now),
        Err(e) => tracing::error!(error = %e, "token_take_failed"),
    }
    asks
}

/// Gives back the tokens of `asks`' grants that the claim did not use.
pub(crate) async fn give_back<S: TaskStore>(shared: &Shared<S>, asks: &[TokenAsk], now: Timestamp) {
    let back = shared.flow.leftovers(asks, now);
    if back.is_empty() {
        return;
    }
    if let Err(e) = shared.store.take_tokens(back, now).await {
        // Lost tokens mean fewer calls for a moment, never more.
        tracing::error!(error = %e, "token_give_back_failed");
    }
}

/// Shares the holds learned here, when there are any, and adopts the
/// cluster's: before a claim, so another node holds as soon as it next
/// reads them.
pub(crate) async fn publish_learned<S: TaskStore>(shared: &Shared<S>, now: Timestamp) {
    if shared.flow.has_learned() {
        exchange_holds(shared, now).await;
    }
}

/// Shares the holds learned here and adopts the cluster's: every settings
/// read, so each node holds what any node learned within a second.
pub(crate) async fn exchange_holds<S: TaskStore>(shared: &Shared<S>, now: Timestamp) {
    let learned = shared.flow.take_learned();
    match shared.store.share_holds(learned.clone(), now).await {
        Ok(holds) => shared.flow.adopt(&holds, now),
        Err(e) => {
            tracing::error!(error = %e, "destination_holds_failed");
            shared.flow.relearn(learned);
        }
    }
}
