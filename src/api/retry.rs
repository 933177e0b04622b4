//! Retry delays for every API call the operator repeats: exponential with jitter (`backon`), without
//! a limit on attempts (a controller keeps trying; what it retries is bounded elsewhere).

use backon::BackoffBuilder;
use std::time::Duration;

pub fn delays(min: Duration, max: Duration) -> backon::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_with_jitter_and_stays_bounded() {
        let d: Vec<Duration> = delays(Duration::from_millis(100), Duration::from_secs(60))
            .take(20)
            .collect();
        assert!(d[5] > d[0]);
        // Jitter adds at most the delay itself.
        assert!(d.iter().all(|d| *d <= Duration::from_secs(120)));
    }
}
