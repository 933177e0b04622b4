//! What a write's answer leads to: [`next`], a pure function of the verb and the answer, so that
//! every rule of the contract's error handling is unit-tested without a server.

use crate::api::client::timed_out;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Create,
    Patch,
    /// Reads the object at the series' name after a create answered 409: whose is it?
    Verify,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Patch => "patch",
            Verb::Verify => "get",
        }
    }
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP answer, with the server's Retry-After when it gave one.
    Status {
        code: u16,
        retry_after: Option<Duration>,
        message: String,
    },
    /// No answer within the deadline.
    Timeout,
    /// The connection failed before an answer.
    Transport(String),
    /// Not sent: the fence closed while the request waited for the rate limit.
    NotSent,
    /// A [`Verb::Verify`] found an object that is not the series' own at its name (HTTP 200).
    Taken,
    /// A [`Verb::Verify`] found the series' own object already holding the state to write (HTTP
    /// 200): another replica wrote it, or an earlier attempt landed unanswered.
    Holds,
}

impl Answer {
    /// The `code` label of `api_requests_total`.
    pub fn code(&self) -> String {
        match self {
            Answer::Status { code, .. } => code.to_string(),
            Answer::Timeout => "timeout".into(),
            Answer::Transport(_) => "error".into(),
            Answer::NotSent => "not_sent".into(),
            Answer::Taken | Answer::Holds => "200".into(),
        }
    }

    pub(super) fn of(result: kube::Result<()>, ok: u16) -> Answer {
        match result {
            Ok(()) => Answer::Status {
                code: ok,
                retry_after: None,
                message: String::new(),
            },
            Err(kube::Error::Api(status)) => Answer::Status {
                code: status.code,
                // A Retry-After beyond ten minutes is a broken proxy's, not a plan.
                retry_after: status
                    .details
                    .as_ref()
                    .map(|d| Duration::from_secs(d.retry_after_seconds.min(600).into()))
                    .filter(|d| !d.is_zero()),
                message: status.message.clone(),
            },
            Err(e) if timed_out(&e) => Answer::Timeout,
            Err(e) => Answer::Transport(e.to_string()),
        }
    }
}

/// What to do after an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    Done,
    Then(Verb),
    /// The name is someone else's: create under the series' next name.
    Rename,
    /// Retry the same verb, not before this (the server's Retry-After), or after the next backoff.
    Retry {
        at_least: Duration,
    },
    Reject(String),
}

/// Decides the next step after a write's answer.
pub fn next(verb: Verb, answer: &Answer) -> Next {
    let (code, retry_after, message) = match answer {
        Answer::Timeout | Answer::Transport(_) | Answer::NotSent => {
            return Next::Retry {
                at_least: Duration::ZERO,
            };
        }
        Answer::Taken => return Next::Rename,
        Answer::Holds => return Next::Done,
        Answer::Status {
            code,
            retry_after,
            message,
        } => (*code, *retry_after, message),
    };
    match (verb, code) {
        // The object at the name is the series' own (a repeated create): update it.
        (Verb::Verify, 200..=299) => Next::Then(Verb::Patch),
        (_, 200..=299) => Next::Done,
        (Verb::Create, 409) => Next::Then(Verb::Verify),
        // Gone between the create and the read: create again.
        (Verb::Verify, 404) => Next::Then(Verb::Create),
        // An install whose role lacks `get` (an older RBAC): update as before this check.
        (Verb::Verify, 403) => Next::Then(Verb::Patch),
        (Verb::Patch, 404) => Next::Then(Verb::Create),
        // The object changed since this replica last knew it (its precondition failed): another
        // replica wrote it, or an earlier attempt landed unanswered. Read it, then reconcile.
        (Verb::Patch, 409) => Next::Then(Verb::Verify),
        (_, 429 | 500..=599) => Next::Retry {
            at_least: retry_after.unwrap_or(Duration::ZERO),
        },
        (_, code) => Next::Reject(format!("HTTP {code}: {message}")),
    }
}

/// Whether the object may hold what the request carried though the answer did not say it was
/// written: no answer, a server error, or a create that found the object there.
pub(super) fn may_hold_it_already(verb: Verb, answer: &Answer) -> bool {
    match answer {
        Answer::Timeout | Answer::Transport(_) => true,
        Answer::Status { code, .. } => *code >= 500 || (verb == Verb::Create && *code == 409),
        Answer::NotSent | Answer::Taken | Answer::Holds => false,
    }
}
