//! Durations as the API writes them (`DURATION_PATTERN`: `1h30m`, `45s`,
//! `0`): read and written with jiff's friendly format, which that pattern is
//! a strict subset of. The pattern is checked first, so what admission
//! refuses is refused here too (a flag such as `--idle-timeout` takes the
//! same form as the field it defaults).

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::jiff::SignedDuration;
use k8s_openapi::jiff::fmt::friendly::{Designator, Spacing, SpanPrinter};

use super::DURATION_PATTERN;

static PATTERN: LazyLock<regex::Regex> = LazyLock::new(|| regex::Regex::new(DURATION_PATTERN).expect("pattern"));

/// The duration `s` writes, or None when it is not one of the API's.
pub fn parse(s: &str) -> Option<Duration> {
    if s.is_empty() || !PATTERN.is_match(s) {
        return None;
    }
    if s == "0" {
        return Some(Duration::ZERO);
    }
    Duration::try_from(s.parse::<SignedDuration>().ok()?).ok()
}

/// `d` as status shows it: `2h`, `1h30m`, `45s`, `0s`.
pub fn format(d: Duration) -> String {
    let d = SignedDuration::try_from(Duration::from_secs(d.as_secs())).unwrap_or(SignedDuration::MAX);
    SpanPrinter::new().designator(Designator::Compact).spacing(Spacing::None).duration_to_string(&d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_form_and_nothing_else() {
        for (s, secs) in [("0", 0), ("45s", 45), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1h0m5s", 3605)] {
            assert_eq!(parse(s), Some(Duration::from_secs(secs)), "{s}");
        }
        for s in ["", "1", "1d", "-1h", "30m1h", "1h 30m", "PT1H", "1.5h", "1 hour", "00", "12345h"] {
            assert_eq!(parse(s), None, "{s:?} is not a duration of the API");
        }
    }

    #[test]
    fn status_shows_the_shortest_form() {
        for (secs, s) in [(0, "0s"), (45, "45s"), (1800, "30m"), (7200, "2h"), (5400, "1h30m"), (3605, "1h5s")] {
            assert_eq!(format(Duration::from_secs(secs)), s);
            assert_eq!(parse(&format(Duration::from_secs(secs))), Some(Duration::from_secs(secs)), "round trip");
        }
    }
}
