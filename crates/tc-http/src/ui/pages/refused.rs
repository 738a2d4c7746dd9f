//! The page a browser gets when the host or origin rule refuses a `/ui/`
//! request: the refusal's message and the flags that end it. Behind a
//! TLS-terminating proxy the server is not told to trust, the first login
//! is refused `403 cross_origin` (the browser is at `https://…`, the server
//! sees `http`); a raw JSON error there would leave a person stranded.

use maud::{DOCTYPE, Markup, html};

use crate::error::ApiError;

pub(crate) fn page(e: &ApiError) -> Markup {
    let misdirected = matches!(e, ApiError::MisdirectedRequest(_));
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Refused · taskcenter" }
                link rel="stylesheet" href="/ui/assets/app.css";
            }
            body.login {
                main {
                    section.refused #refused {
                        h1 { "taskcenter" }
                        div.notice.error role="alert" {
                            strong { (e.status().as_u16()) " " (e.code()) } ": " (e.message())
                        }
                        @if misdirected {
                            p {
                                "This server does not answer to the name in the address bar. "
                                "Start it with " code { "--allowed-host <host>" }
                                " (or " code { "TC_ALLOWED_HOSTS" } ") naming the host you open it by."
                            }
                        } @else {
                            p {
                                "The browser's origin is not the one this server sees. Behind a "
                                "proxy that terminates TLS, the server sees plain http unless it "
                                "trusts the proxy's word on the client's scheme and host."
                            }
                        }
                        p { "Behind a reverse proxy or load balancer, start the server with:" }
                        ul {
                            li {
                                code { "--trusted-proxy <proxy address>" }
                                " (or " code { "TC_TRUSTED_PROXIES" } "; an address or a network "
                                "such as " code { "10.0.0.0/8" } "): its "
                                code { "X-Forwarded-Proto" } " and " code { "X-Forwarded-Host" }
                                " (or " code { "Forwarded: proto=…;host=…" } ") are believed;"
                            }
                            li {
                                code { "--allowed-host <host>" }
                                ": the name people open the dashboard by."
                            }
                        }
                        p.muted {
                            "The proxy must send those headers and the browser's " code { "Origin" }
                            " unchanged. See docs/api.md, \"Dashboard behind a proxy\"."
                        }
                    }
                }
            }
        }
    }
}
