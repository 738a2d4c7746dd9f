//! The page helpers a browser test drives the dashboard with (through
//! fantoccini and chromedriver): waiting on a signal, reading and clicking
//! elements, dialogs, screenshots. Shared by ui_test.rs and
//! ui_test_proxy.rs, which import it and not each other's helpers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fantoccini::{Client, Locator};
use serde_json::{Value, json};
use tokio::time::Instant;

/// How long any one condition may take to become true.
pub(crate) const WAIT: Duration = Duration::from_secs(20);
/// Between two looks at a condition.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// Polls `probe` until it answers `Some`, or fails at the deadline naming `what`.
pub(crate) async fn until<T, F, Fut>(what: &str, mut probe: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {WAIT:?} waiting for {what}"));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The string a script gives back about the page, or `None` for its null.
/// One script is one WebDriver command: the overview replaces its rows every
/// 2 s, and an element found by one command can be gone ("stale") by the next.
async fn read_in_page(
    browser: &Client,
    script: &str,
    args: Vec<Value>,
    what: &str,
) -> Result<Option<String>, String> {
    match browser.execute(script, args).await {
        Ok(Value::Null) => Ok(None),
        Ok(Value::String(text)) => Ok(Some(text)),
        Ok(other) => Err(format!("{what}: not text: {other}")),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// The visible text of the first element `css` matches, or `None`.
pub(crate) async fn text_of(browser: &Client, css: &str) -> Result<Option<String>, String> {
    let read = "const e = document.querySelector(arguments[0]); \
                return e === null ? null : e.innerText.trim();";
    read_in_page(browser, read, vec![json!(css)], &format!("text of {css}")).await
}

/// An attribute of the first element `css` matches (`None` when there is no
/// such element or attribute).
pub(crate) async fn attr_of(
    browser: &Client,
    css: &str,
    attr: &str,
) -> Result<Option<String>, String> {
    let read = "const e = document.querySelector(arguments[0]); \
                return e === null ? null : e.getAttribute(arguments[1]);";
    let what = format!("{attr} of {css}");
    read_in_page(browser, read, vec![json!(css), json!(attr)], &what).await
}

pub(crate) async fn click(browser: &Client, css: &str) -> Result<(), String> {
    let el = browser
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .map_err(|e| format!("waiting for {css}: {e}"))?;
    el.click().await.map_err(|e| format!("clicking {css}: {e}"))
}

/// Accepts the confirm() dialog the last click opened, returning its text.
pub(crate) async fn accept_dialog(browser: &Client) -> Result<String, String> {
    let text = until("a confirm dialog", || async {
        Ok(browser.get_alert_text().await.ok())
    })
    .await?;
    browser
        .accept_alert()
        .await
        .map_err(|e| format!("accepting the dialog: {e}"))?;
    Ok(text)
}

pub(crate) async fn goto(browser: &Client, url: &str) -> Result<(), String> {
    browser
        .goto(url)
        .await
        .map_err(|e| format!("opening {url}: {e}"))
}

pub(crate) async fn screenshot(
    browser: &Client,
    dir: &Path,
    name: &str,
) -> Result<PathBuf, String> {
    let png = browser
        .screenshot()
        .await
        .map_err(|e| format!("screenshot {name}: {e}"))?;
    let path = dir.join(format!("{name}.png"));
    std::fs::write(&path, png).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("[ui-test] saved {}", path.display());
    Ok(path)
}

pub(crate) fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

/// Whether a dialog is open (an alert() that should never have run).
pub(crate) async fn dialog_open(browser: &Client) -> bool {
    browser.get_alert_text().await.is_ok()
}
