//! Phase 4, cancel: from a cancel request to the downstream seeing its call's connection close.

use super::*;

impl Bench {
    pub(super) async fn cancel(&mut self) -> Result<(), String> {
        let hang = HangingDownstream::start().await?;
        let tc = self.start_tc_full("cancel")?;
        let endpoint = Endpoint::new(tc.addr);
        let mut conn = Conn::open(endpoint.addr).await?;
        let deadline = Instant::now() + self.plan.patience;
        let mut to_close = Vec::new();
        let mut to_answer = Vec::new();
        let mut misses = Vec::new();
        for i in 0..self.plan.cancels as u64 {
            if Instant::now() >= deadline || misses.len() >= 5 {
                break;
            }
            match cancel_one(&mut conn, &endpoint, &hang, i).await {
                Ok((closed, answered)) => {
                    to_close.push(closed);
                    to_answer.push(answered);
                }
                Err(e) => misses.push(e),
            }
        }
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let count = to_close.len();
        let (Some(closed), Some(answered)) =
            (stats::summarize(to_close), stats::summarize(to_answer))
        else {
            let why = misses
                .first()
                .cloned()
                .unwrap_or_else(|| "no cancel ran".into());
            self.fail("cancel_p99", "4 cancel in flight p99", "ms", why);
            return Ok(());
        };
        self.progress(&format!(
            "{count} cancels: to the downstream's close p50 {:.2} ms p99 {:.2} ms max {:.2} ms; \
             to the 200 p99 {:.2} ms; {} failed",
            ms(closed.p50),
            ms(closed.p99),
            ms(closed.max),
            ms(answered.p99),
            misses.len()
        ));
        let note = if misses.is_empty() {
            warnings
        } else {
            format!(
                "{} of {} failed, first: {}. {warnings}",
                misses.len(),
                count + misses.len(),
                misses[0]
            )
        };
        if !misses.is_empty() {
            self.failures.push(format!("4 cancel: {note}"));
        }
        self.push(Figure::new(
            "cancel_p50",
            &format!("4 cancel → downstream close p50 ({count})"),
            ms(closed.p50),
            "ms",
        ));
        self.push(
            Figure::new(
                "cancel_p99",
                &format!("4 cancel → downstream close p99 ({count})"),
                ms(closed.p99),
                "ms",
            )
            .target(Target::AtMost(20.0))
            .note(note),
        );
        self.detail(
            "cancel",
            json!({
                "cancels": count,
                "failed": misses,
                "close_ms": summary_json(&closed),
                "cancel_reply_ms": summary_json(&answered),
            }),
        );
        Ok(())
    }

    // ---- 5 -------------------------------------------------------------
}

/// Submits a task to the hanging downstream, waits until its call arrived,
/// cancels it: (cancel sent → connection closed, cancel sent → 200).
async fn cancel_one(
    conn: &mut Conn,
    endpoint: &Endpoint,
    hang: &HangingDownstream,
    i: u64,
) -> Result<(Duration, Duration), String> {
    const WAIT: Duration = Duration::from_secs(10);
    let body = load::submit_body(
        &hang.url(),
        "cancel",
        i,
        r#","max_attempts":1,"timeout_ms":600000"#,
    );
    let reply = conn
        .send(endpoint.request(Method::POST, "/tasks", Some(body))?)
        .await?;
    if reply.status != StatusCode::CREATED {
        return Err(format!("submit: status {}", reply.status));
    }
    let view: Value =
        serde_json::from_slice(&reply.body).map_err(|e| format!("submit answer: {e}"))?;
    let id = view["id"]
        .as_str()
        .ok_or("submit answer has no id")?
        .to_owned();
    if hang.arrived(&id, Instant::now() + WAIT).await.is_none() {
        return Err(format!("task {id}: call never arrived"));
    }
    let sent = Instant::now();
    let reply = conn
        .send(endpoint.request(
            Method::POST,
            &format!("/tasks/{id}/cancel"),
            Some(Bytes::new()),
        )?)
        .await?;
    let answered = Instant::now() - sent;
    let state: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
    if reply.status != StatusCode::OK || state["state"] != "canceled" {
        return Err(format!(
            "cancel {id}: status {} {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        ));
    }
    match hang.closed(&id, sent + WAIT).await {
        Some(at) => Ok((at.saturating_duration_since(sent), answered)),
        None => Err(format!("task {id}: connection not closed within {WAIT:?}")),
    }
}
