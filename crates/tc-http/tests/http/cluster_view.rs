//! A destination's view shows the cluster's holds: a
//! breaker another node opened and its backoff, read from the store, over
//! what this node's worker knows (here: nothing, a closed breaker).

use std::time::Duration;

use serde_json::json;
use tc_http::HttpConfig;
use tc_model::cluster::DestinationHolds;
use tc_model::store::Work;
use tc_model::view::rfc3339;

use crate::support::{NOW, harness};

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn a_destination_shows_the_breaker_and_backoff_another_node_shared() {
    let h = harness(HttpConfig::default()).await;
    let put = h
        .call(
            "PUT",
            "/destinations/127.0.0.1:9",
            &[JSON],
            br#"{"max_in_flight": 4}"#,
        )
        .await;
    assert_eq!(put.status, 200, "{put:?}");
    let open_until = NOW.saturating_add(Duration::from_secs(60));
    let backoff_until = NOW.saturating_add(Duration::from_secs(30));
    let ended = DestinationHolds {
        breaker_open_until: Some(NOW),
        ..DestinationHolds::default()
    };
    let held = DestinationHolds {
        breaker_open_until: Some(open_until),
        backoff_until: Some(backoff_until),
        ratelimit_until: None,
    };
    // Written at an earlier time, so the ended one is still stored.
    let earlier = tc_model::Timestamp::from_millis(NOW.as_millis() - 1_000);
    h.store
        .share_holds(
            vec![("127.0.0.1:9".into(), held), ("127.0.0.1:10".into(), ended)],
            earlier,
        )
        .await
        .unwrap();
    let one = h.call("GET", "/destinations/127.0.0.1:9", &[], b"").await;
    assert_eq!(one.status, 200, "{one:?}");
    let want = json!({"breaker": "open", "backoff_until": rfc3339(backoff_until)});
    for field in ["breaker", "backoff_until"] {
        assert_eq!(one.json()[field], want[field], "{field}: {}", one.json());
    }
    let list = h.call("GET", "/destinations", &[], b"").await;
    assert_eq!(
        list.json()["destinations"][0]["breaker"],
        "open",
        "{}",
        list.json()
    );
    // A hold that ended shows nothing: this node's own view stands.
    let put = h
        .call(
            "PUT",
            "/destinations/127.0.0.1:10",
            &[JSON],
            br#"{"max_in_flight": 4}"#,
        )
        .await;
    assert_eq!(put.json()["breaker"], "closed", "{}", put.json());
    assert_eq!(put.json()["backoff_until"], json!(null));
}
