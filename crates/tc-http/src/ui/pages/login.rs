//! The login page: all a browser without a session sees when the server
//! has an API token.

use maud::{DOCTYPE, Markup, html};

pub(crate) fn page(problem: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Log in · taskcenter" }
                link rel="stylesheet" href="/ui/assets/app.css";
            }
            body.login {
                main {
                    form.login #login method="post" action="/ui/login" {
                        h1 { "taskcenter" }
                        p #login-help {
                            "Log in with this server's API token (" code { "--api-token" } ") "
                            "or a tenant's API key (" code { "tck_…" } "): a key shows its tenant's tasks only."
                        }
                        @if let Some(problem) = problem {
                            div.notice.error #login-error role="alert" { (problem) }
                        }
                        label {
                            span { "API token or tenant key" }
                            input #token type="password" name="token" autocomplete="current-password" required autofocus;
                        }
                        button type="submit" { "Log in" }
                        p.muted { "The browser keeps a session cookie (HttpOnly), never the token." }
                    }
                }
            }
        }
    }
}
