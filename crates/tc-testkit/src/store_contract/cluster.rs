//! The contract of destination limits across the cluster: one token bucket per destination that
//! every caller's grants come from (so the calls of every node stay within
//! the rate), given-back tokens counted again, and the destination holds
//! shared, each kept to its later end and dropped once ended.

use std::time::Duration;

use tc_model::cluster::{DestinationHolds, TokenAsk, TokenGrant};
use tc_model::store::TaskStore;

use super::Verdict;
use super::check::{DEST_A, DEST_B, Step, at};

fn ask(destination: &str, give_back: u32, take: u32) -> TokenAsk {
    TokenAsk {
        destination: destination.to_owned(),
        rate_per_s: 10.0,
        size: 5.0,
        give_back,
        take,
    }
}

fn grant(granted: u32, next_in_ms: Option<u64>) -> TokenGrant {
    TokenGrant {
        granted,
        next_in: next_in_ms.map(Duration::from_millis),
    }
}

/// Each row: asks at a time (ms after T0), and the grants answered. A
/// bucket first met is full (5); 10/s refill it, never above 5; tokens
/// given back are granted again; each destination has its own bucket.
pub async fn tokens_come_from_one_bucket_per_destination<S: TaskStore>(store: S) -> Verdict {
    let rows: Vec<(i64, Vec<TokenAsk>, Vec<TokenGrant>)> = vec![
        (0, vec![ask(DEST_A, 0, 3)], vec![grant(3, None)]),
        (
            0,
            vec![ask(DEST_A, 0, 3), ask(DEST_B, 0, 3)],
            vec![grant(2, Some(100)), grant(3, None)],
        ),
        (100, vec![ask(DEST_A, 0, 3)], vec![grant(1, Some(100))]),
        (100, vec![ask(DEST_A, 2, 0)], vec![grant(0, None)]),
        (100, vec![ask(DEST_A, 0, 3)], vec![grant(2, Some(100))]),
        (10_000, vec![ask(DEST_A, 0, 9)], vec![grant(5, Some(100))]),
        (
            10_000,
            vec![ask(DEST_A, 9, 0), ask(DEST_A, 0, 9)],
            vec![grant(0, None), grant(5, Some(100))],
        ),
    ];
    for (ms, asks, want) in rows {
        let got = store
            .take_tokens(asks.clone(), at(ms))
            .await
            .step("take_tokens")?;
        ensure_eq!(got, want, "{asks:?} at {ms} ms");
    }
    Ok(())
}

/// Callers asking at once share one bucket: 8 callers taking one token 4
/// times each, all at the same time, get the bucket's 5 tokens between
/// them, no more.
pub async fn concurrent_token_takers_share_one_bucket<S: TaskStore>(store: S) -> Verdict {
    let store = std::sync::Arc::new(store);
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let store = std::sync::Arc::clone(&store);
        callers.spawn(async move {
            let mut got = 0u32;
            for _ in 0..4 {
                let grants = store.take_tokens(vec![ask(DEST_A, 0, 1)], at(0)).await?;
                got += grants.iter().map(|g| g.granted).sum::<u32>();
            }
            Ok::<u32, tc_model::store::StoreError>(got)
        });
    }
    let mut total = 0;
    while let Some(joined) = callers.join_next().await {
        total += joined
            .map_err(|e| format!("a caller failed: {e}"))?
            .step("take_tokens")?;
    }
    ensure_eq!(total, 5, "tokens granted in all");
    Ok(())
}

/// Holds written by one caller are read by any; each keeps its later end
/// whatever order they come in; ended ones are no longer answered.
pub async fn destination_holds_are_shared_until_they_end<S: TaskStore>(store: S) -> Verdict {
    let holds = |b: Option<i64>, o: Option<i64>, r: Option<i64>| DestinationHolds {
        breaker_open_until: b.map(at),
        backoff_until: o.map(at),
        ratelimit_until: r.map(at),
    };
    let read = store.share_holds(Vec::new(), at(0)).await.step("read")?;
    ensure_eq!(read, Vec::new(), "no holds at first");
    let learned = vec![
        (DEST_B.to_owned(), holds(Some(10_000), None, None)),
        (DEST_A.to_owned(), holds(None, Some(5_000), None)),
    ];
    let got = store.share_holds(learned, at(0)).await.step("share")?;
    let both = vec![
        (DEST_A.to_owned(), holds(None, Some(5_000), None)),
        (DEST_B.to_owned(), holds(Some(10_000), None, None)),
    ];
    ensure_eq!(got, both, "the holds just shared, in name order");
    // A shorter backoff learned later keeps the longer one.
    let learned = vec![(DEST_A.to_owned(), holds(None, Some(3_000), Some(2_000)))];
    let got = store.share_holds(learned, at(1)).await.step("share")?;
    ensure_eq!(
        got,
        vec![
            (DEST_A.to_owned(), holds(None, Some(5_000), Some(2_000))),
            (DEST_B.to_owned(), holds(Some(10_000), None, None)),
        ],
        "each hold keeps its later end"
    );
    let read = store
        .share_holds(Vec::new(), at(4_000))
        .await
        .step("read")?;
    ensure_eq!(
        read,
        vec![
            (DEST_A.to_owned(), holds(None, Some(5_000), None)),
            (DEST_B.to_owned(), holds(Some(10_000), None, None)),
        ],
        "an ended hold is not answered"
    );
    let read = store
        .share_holds(Vec::new(), at(10_000))
        .await
        .step("read")?;
    ensure_eq!(read, Vec::new(), "every hold ended");
    Ok(())
}
