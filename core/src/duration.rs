//! One duration syntax for flags and CRD fields: the Kubernetes form (`metav1.Duration`, Go's
//! `time.ParseDuration` without sign or fraction), such as `90s`, `6m` or `1h30m`.
//!
//! kube-core's `Duration` parses it. That parser panics when a value overflows, so a value is first
//! checked against the CRD's own pattern with every number at most [`MAX_DIGITS`] digits, which keeps
//! the total far inside its range; the result must then lie between 1 s and 100 years, far from where
//! clock arithmetic overflows.

use crate::settings::SettingsError;
use chrono::TimeDelta;
use std::time::Duration;

/// The pattern the CRD enforces on every duration field; the same one [`parse`] applies to flags.
pub const DURATION_PATTERN: &str = r"^([0-9]+(ns|us|µs|ms|s|m|h))+$";

/// Most digits in one number of a duration.
pub const MAX_DIGITS: usize = 9;

const MIN: Duration = Duration::from_secs(1);
const MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
const UNITS: [&str; 7] = ["ns", "us", "µs", "ms", "s", "m", "h"];

/// A value that is not a duration in the one syntax, or out of range.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DurationError {
    #[error("{value:?} is not a duration such as 90s, 6m or 1h ({reason})")]
    Syntax { value: String, reason: String },
    #[error("{0:?} is shorter than the minimum of 1s")]
    TooShort(String),
    #[error("{0:?} is longer than the maximum of 100 years")]
    TooLong(String),
}

/// Parses a duration between 1 s and 100 years (a flag's value: clap names the flag).
pub fn parse_value(value: &str) -> Result<TimeDelta, DurationError> {
    let text = value.trim();
    let bad = |reason: &str| DurationError::Syntax {
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    check_syntax(text).map_err(bad)?;
    let d: kube_core::Duration = text.parse().map_err(|e| bad(&format!("{e}")))?;
    let d = Duration::from(d);
    if d < MIN {
        return Err(DurationError::TooShort(value.to_owned()));
    }
    if d > MAX {
        return Err(DurationError::TooLong(value.to_owned()));
    }
    TimeDelta::from_std(d).map_err(|e| bad(&e.to_string()))
}

/// [`parse_value`], or zero for `0` or any zero duration (`0s`, `0m`): a setting that can be off.
pub fn parse_value_or_off(value: &str) -> Result<TimeDelta, DurationError> {
    if value.trim() == "0" {
        return Ok(TimeDelta::zero());
    }
    match parse_value(value) {
        Err(DurationError::TooShort(v)) => {
            let d: kube_core::Duration =
                value.trim().parse().map_err(|e| DurationError::Syntax {
                    value: v.clone(),
                    reason: format!("{e}"),
                })?;
            if Duration::from(d).is_zero() {
                Ok(TimeDelta::zero())
            } else {
                Err(DurationError::TooShort(v))
            }
        }
        other => other,
    }
}

/// [`parse_value_or_off`] for a field of a policy.
pub fn parse_or_off(field: &'static str, value: &str) -> Result<TimeDelta, SettingsError> {
    parse_value_or_off(value).map_err(|e| to_settings_error(field, e))
}

/// The same as a `std` duration (never negative).
pub fn parse_std(value: &str) -> Result<Duration, DurationError> {
    parse_value(value).map(|d| d.to_std().unwrap_or(MIN))
}

/// Parses a duration for `field` (a CRD field path, named in the error).
pub fn parse(field: &'static str, value: &str) -> Result<TimeDelta, SettingsError> {
    parse_value(value).map_err(|e| to_settings_error(field, e))
}

fn to_settings_error(field: &'static str, e: DurationError) -> SettingsError {
    match e {
        DurationError::Syntax { value, reason } => SettingsError::BadDuration {
            field,
            value,
            reason,
        },
        DurationError::TooShort(value) => SettingsError::TooShort { field, value },
        DurationError::TooLong(value) => SettingsError::TooLong { field, value },
    }
}

/// `DURATION_PATTERN`, with numbers of at most [`MAX_DIGITS`] digits.
fn check_syntax(mut s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("empty");
    }
    while !s.is_empty() {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err("expected a number, as in 90s, 6m or 1h30m");
        }
        if digits > MAX_DIGITS {
            return Err("a number has more than 9 digits");
        }
        s = &s[digits..];
        // The longest unit that matches, so that `ms` is not read as `m` then `s`.
        let unit = UNITS
            .iter()
            .filter(|u| s.starts_with(**u))
            .max_by_key(|u| u.len())
            .ok_or("expected a unit: ns, us, ms, s, m or h")?;
        s = &s[unit.len()..];
    }
    Ok(())
}

/// Formats a duration the way a user writes it: `30m`, `1h30m`, `90s` as `1m30s`.
pub fn format(d: TimeDelta) -> String {
    let total = d.num_seconds().max(0);
    let (h, m, s) = (total / 3600, total / 60 % 60, total % 60);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_refuse_sub_second() {
        assert_eq!(parse("f", "90s").unwrap(), TimeDelta::seconds(90));
        assert_eq!(parse("f", "6m").unwrap(), TimeDelta::minutes(6));
        assert_eq!(parse("f", "1h").unwrap(), TimeDelta::hours(1));
        assert_eq!(parse("f", "1h30m").unwrap(), TimeDelta::minutes(90));
        assert!(matches!(
            parse("f", "500ms"),
            Err(SettingsError::TooShort { .. })
        ));
        assert!(matches!(
            parse("f", "1000000h"),
            Err(SettingsError::TooLong { .. })
        ));
        let e = parse("spec.finishAfter", "soon").unwrap_err();
        assert!(e.to_string().starts_with("spec.finishAfter"));
        assert_eq!(format(TimeDelta::minutes(30)), "30m");
        assert_eq!(format(TimeDelta::seconds(5400)), "1h30m");
    }

    #[test]
    fn values_that_would_overflow_are_refused_not_a_panic() {
        for v in [
            "999999999999h",
            "99999999999999999999999999h",
            "18446744073709551616s",
            "999999999h999999999h999999999h999999999h",
        ] {
            assert!(parse("spec.heartbeatInterval", v).is_err(), "{v}");
        }
    }

    #[test]
    fn only_the_kubernetes_form_is_accepted() {
        assert_eq!(parse("f", "1m30s").unwrap(), TimeDelta::seconds(90));
        assert_eq!(parse("f", "1500ms").unwrap(), TimeDelta::milliseconds(1500));
        assert_eq!(parse("f", "2000000µs").unwrap(), TimeDelta::seconds(2));
        for v in [
            "", "1", "h", "-1h", "1.5h", "1 h", "2 days", "1y", "1d", "6M", "µ",
        ] {
            assert!(
                matches!(parse("f", v), Err(SettingsError::BadDuration { .. })),
                "{v:?}"
            );
        }
    }

    #[test]
    fn a_setting_that_can_be_off_takes_zero() {
        for off in ["0", "0s", "0m", " 0h0s "] {
            assert_eq!(parse_value_or_off(off), Ok(TimeDelta::zero()), "{off}");
        }
        assert_eq!(parse_value_or_off("90s"), Ok(TimeDelta::seconds(90)));
        assert!(matches!(
            parse_value_or_off("500ms"),
            Err(DurationError::TooShort(_))
        ));
        assert!(matches!(
            parse_value_or_off("00"),
            Err(DurationError::Syntax { .. })
        ));
        assert!(matches!(
            parse_value_or_off("-1s"),
            Err(DurationError::Syntax { .. })
        ));
    }
}
