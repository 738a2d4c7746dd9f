//! The client subcommands' flags, one file a group (args/task.rs,
//! destination.rs, schedule.rs, tenant.rs, topic.rs; flow keys' beside their
//! client in flow_key.rs), and what they share here: the connection, the
//! output flag and the value parsers.
//!
//! `--server` and `--token` are global to every group: they may come before
//! or after the subcommand (`task --server U list`, `task list --server U`).
//! `--json` (print the API's JSON) is accepted by the group and by every
//! subcommand but `task submit`, whose `--json` is the payload, as the issue
//! pins it. clap cannot have both on one command (a global flag is copied
//! into every subcommand, and two `--json` on `submit` are refused), so the
//! output flag is declared per subcommand instead of globally; a submit asks
//! for JSON output on the group: `tc-server task --json submit --url U --json J`.

use clap::Args;
use serde_json::value::RawValue;

/// How to reach the server. Global: accepted anywhere after `task` or
/// `destination`.
#[derive(Debug, Clone, Args)]
pub(crate) struct Connection {
    /// The server's base URL (`http://` or `https://`; a path prefix is kept,
    /// for a server behind a reverse proxy).
    #[arg(long, env = "TC_SERVER_URL", default_value = "http://127.0.0.1:8080",
          global = true, value_parser = server_url, help_heading = "Server")]
    pub(crate) server: ServerUrl,

    /// The API token, sent as `Authorization: Bearer <token>`: the server's
    /// `--api-token` (the admin), or a tenant's API key (`tck_…`, its own
    /// tasks only).
    #[arg(long, env = "TC_API_TOKEN", hide_env_values = true, global = true,
          value_parser = Quiet(token), help_heading = "Server")]
    pub(crate) token: Option<String>,
}

/// The output flag of one command.
#[derive(Debug, Clone, Copy, Default, Args)]
pub(crate) struct Output {
    /// Print the API's JSON instead of tables: one object per line (a list
    /// prints one line per task or destination).
    #[arg(long)]
    pub(crate) json: bool,
}

mod destination;
mod schedule;
mod task;
mod tenant;
mod topic;

pub(crate) use destination::*;
pub(crate) use schedule::*;
pub(crate) use task::*;
pub(crate) use tenant::*;
pub(crate) use topic::*;

/// `destination list`, and `schedule list` and `tenant list`, which take the
/// same flags.
#[derive(Debug, Args)]
pub(crate) struct ListDestinationsArgs {
    #[command(flatten)]
    pub(crate) output: Output,
}

/// A setting's new value: a value, or cleared (`none`, sent as `null`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Setting<T> {
    /// Set to this.
    To(T),
    /// Cleared.
    Clear,
}

pub(crate) fn setting<T: std::str::FromStr>(value: &str) -> Result<Setting<T>, String>
where
    T::Err: std::fmt::Display,
{
    if value.eq_ignore_ascii_case("none") {
        return Ok(Setting::Clear);
    }
    value
        .parse()
        .map(Setting::To)
        .map_err(|e| format!("{e}: give a number or none"))
}

/// `Name: value`, split at the first colon, the value trimmed of the
/// spaces around it (as a header line is read). The server checks the rest.
/// The error never repeats the value (nor the name, which is unknown when
/// the colon is missing): the caller names the header by its position.
pub(crate) fn header(value: &str) -> Result<(String, String), String> {
    let (name, rest) = value
        .split_once(':')
        .ok_or_else(|| "give a header as `Name: value`".to_owned())?;
    let name = name.trim();
    if name.is_empty() {
        return Err("the header's name is empty: give `Name: value`".to_owned());
    }
    Ok((name.to_owned(), rest.trim_matches([' ', '\t']).to_owned()))
}

/// One of the five methods, in any case (sent upper case).
fn method(value: &str) -> Result<String, String> {
    let upper = value.to_ascii_uppercase();
    match upper.as_str() {
        "POST" | "PUT" | "PATCH" | "DELETE" | "GET" => Ok(upper),
        _ => Err("give POST, PUT, PATCH, DELETE or GET".to_owned()),
    }
}

fn rate(value: &str) -> Result<Setting<f64>, String> {
    match setting::<f64>(value)? {
        // NaN and infinity have no JSON form.
        Setting::To(r) if !r.is_finite() => Err("must be a finite number, or none".into()),
        other => Ok(other),
    }
}

/// `tc-server healthcheck`: no token, no output flags; what a container's
/// HEALTHCHECK runs, where there is no curl.
#[derive(Debug, Args)]
pub(crate) struct HealthcheckArgs {
    /// The server's base URL (`http://` or `https://`).
    #[arg(long, env = "TC_SERVER_URL", default_value = "http://127.0.0.1:8080",
          value_parser = server_url)]
    pub(crate) server: ServerUrl,

    /// How long the whole check may take, connecting included, before it
    /// fails as unreachable (exit 3).
    #[arg(long, default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub(crate) timeout_ms: u64,
}

/// The server's base URL, checked: `http` or `https`, a host, no query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerUrl {
    /// `https` or not.
    pub(crate) tls: bool,
    /// `scheme://authority[/prefix]`, without a trailing `/`.
    pub(crate) base: String,
}

fn server_url(value: &str) -> Result<ServerUrl, String> {
    let uri: http::Uri = value
        .parse()
        .map_err(|e| format!("{e}: give a URL such as http://127.0.0.1:8080"))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err("must start with http:// or https://".into()),
    };
    if uri.host().is_none_or(str::is_empty) {
        return Err("must name a host".into());
    }
    if uri.query().is_some() {
        return Err("must not have a query".into());
    }
    Ok(ServerUrl {
        tls,
        base: value.trim_end_matches('/').to_owned(),
    })
}

fn token(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    // It goes into a header: visible ASCII only.
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be visible ASCII characters, without spaces".into());
    }
    Ok(value.to_owned())
}

/// A value parser whose refusal names the argument, never the value given:
/// clap's own message quotes the value, and a token or a JSON body (with
/// its `headers`) may be a credential. The argument is checked by the
/// wrapped function, whose message must not repeat the value either.
#[derive(Clone)]
struct Quiet<T>(fn(&str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> clap::builder::TypedValueParser for Quiet<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let name = arg
            .and_then(clap::Arg::get_long)
            .map_or_else(|| "a value".to_owned(), |long| format!("--{long}"));
        let refuse = |why: &str| {
            cmd.clone().error(
                clap::error::ErrorKind::ValueValidation,
                format!("{name}: {why}"),
            )
        };
        let text = value.to_str().ok_or_else(|| refuse("not valid UTF-8"))?;
        (self.0)(text).map_err(|why| refuse(&why))
    }
}

/// A submit's payload: valid JSON, kept as written.
#[derive(Debug, Clone)]
pub(crate) struct Payload(pub(crate) Box<RawValue>);

pub(crate) fn payload(value: &str) -> Result<Payload, String> {
    let text = match value.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?
        }
        None => value.to_owned(),
    };
    // Surrounding whitespace (a file's last newline) is insignificant.
    RawValue::from_string(text.trim().to_owned())
        .map(Payload)
        .map_err(|e| format!("not valid JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_are_checked() {
        let check = |value: &str, expected: Result<(&str, bool), &str>| {
            let got = server_url(value);
            match expected {
                Ok((base, tls)) => {
                    let url = got.unwrap_or_else(|e| panic!("{value}: {e}"));
                    assert_eq!((url.base.as_str(), url.tls), (base, tls), "{value}");
                }
                Err(part) => {
                    let e = got.expect_err(value);
                    assert!(e.contains(part), "{value}: {e}");
                }
            }
        };
        check(
            "http://127.0.0.1:8080",
            Ok(("http://127.0.0.1:8080", false)),
        );
        check(
            "http://127.0.0.1:8080/",
            Ok(("http://127.0.0.1:8080", false)),
        );
        check(
            "https://tc.example/api/",
            Ok(("https://tc.example/api", true)),
        );
        check("ftp://tc.example", Err("http:// or https://"));
        check("127.0.0.1:8080", Err("http:// or https://"));
        check("http://h/?a=1", Err("query"));
        check("not a url", Err("give a URL"));
    }

    #[test]
    fn settings_take_a_number_or_none() {
        assert_eq!(setting::<u32>("5"), Ok(Setting::To(5)));
        assert_eq!(setting::<u32>("NONE"), Ok(Setting::Clear));
        assert!(setting::<u32>("-1").is_err());
        assert_eq!(rate("2.5"), Ok(Setting::To(2.5)));
        assert!(rate("inf").is_err());
        assert!(rate("NaN").is_err());
    }

    #[test]
    fn payloads_are_kept_as_written() {
        let p = payload(r#" {"b": 1, "a": 1.0} "#).unwrap();
        assert_eq!(p.0.get(), r#"{"b": 1, "a": 1.0}"#);
        assert!(payload("{").unwrap_err().contains("not valid JSON"));
        assert!(
            payload("@/no/such/file")
                .unwrap_err()
                .contains("cannot read")
        );
    }

    #[test]
    fn tokens_must_fit_a_header() {
        assert!(token("s3cret").is_ok());
        assert!(token("").is_err());
        assert!(token("a b").is_err());
        assert!(token("a\nb").is_err());
    }
}
