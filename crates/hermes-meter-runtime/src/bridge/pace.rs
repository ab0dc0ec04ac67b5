//! How many rows the writer's background steps take at once: each kind of
//! step (closing idle runs, each retention kind) sizes its next batch by
//! how long its last one took, so a transaction holds the write lock for
//! about [`TARGET`] on any disk and at any store size.
//!
//! The size benchmark (`benches/size.rs`) paces its idle sweep and
//! retention with it, as the writer does.
//!
//! A fixed batch that takes a few milliseconds on a warm store took
//! seconds on a year's store whose pages the disk had to fetch (the size
//! bench at 1,000,000 sessions: 2.9 s for 32 idle sessions, 4.6 s for 500
//! outbox rows). Gating hooks wait for the writer, and other processes
//! for the lock, for that long.

use std::time::Duration;

/// How long a background transaction should hold the write lock.
pub(crate) const TARGET: Duration = Duration::from_millis(5);

/// A batch size between 1 and its kind's most, following how long the
/// batches take: cut in proportion after one that ran over [`TARGET`],
/// doubled after a full one that took under half of it.
#[derive(Debug, Clone, Copy)]
pub struct BatchSize {
    size: usize,
    most: usize,
}

impl BatchSize {
    /// Starts at `most`: a store that is quick keeps the batches it had.
    pub fn new(most: usize) -> Self {
        let most = most.max(1);
        BatchSize { size: most, most }
    }

    /// The size of the next batch.
    pub fn get(&self) -> usize {
        self.size
    }

    /// Learns from a batch of [`BatchSize::get`] rows that took `took` and
    /// handled `done` of them (fewer: nothing more was left to do, which
    /// says nothing about a larger batch).
    pub fn took(&mut self, took: Duration, done: usize) {
        if took > TARGET {
            let scaled = self.size as f64 * TARGET.as_secs_f64() / took.as_secs_f64();
            self.size = (scaled as usize).clamp(1, self.size.saturating_sub(1).max(1));
        } else if done >= self.size && took < TARGET / 2 {
            self.size = (self.size * 2).min(self.most);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_slow_batch_cuts_the_next_in_proportion_down_to_one() {
        let mut b = BatchSize::new(500);
        b.took(ms(50), 500);
        assert_eq!(b.get(), 50);
        b.took(ms(4_600), 50);
        assert_eq!(b.get(), 1);
        // One row over the target still cannot go below one.
        b.took(ms(100), 1);
        assert_eq!(b.get(), 1);
    }

    #[test]
    fn a_batch_just_over_the_target_still_shrinks() {
        let mut b = BatchSize::new(32);
        b.took(TARGET + Duration::from_micros(1), 32);
        assert_eq!(b.get(), 31);
    }

    #[test]
    fn quick_full_batches_grow_back_to_the_most_and_no_further() {
        let mut b = BatchSize::new(32);
        b.took(ms(40), 32);
        assert_eq!(b.get(), 4);
        for expected in [8, 16, 32, 32] {
            b.took(ms(1), b.get());
            assert_eq!(b.get(), expected);
        }
    }

    #[test]
    fn a_quick_batch_that_ran_out_of_work_or_took_the_target_keeps_its_size() {
        let mut b = BatchSize::new(64);
        b.took(ms(20), 64);
        assert_eq!(b.get(), 16);
        b.took(ms(1), 3);
        assert_eq!(b.get(), 16);
        b.took(ms(4), 16);
        assert_eq!(b.get(), 16);
    }

    #[test]
    fn a_most_of_zero_still_takes_one() {
        let b = BatchSize::new(0);
        assert_eq!(b.get(), 1);
    }
}
