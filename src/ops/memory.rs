//! Hands the heap a burst of work freed back to the kernel once the burst is
//! over.
//!
//! glibc's malloc keeps the pages it grew into for a burst (the initial list
//! of every watched object, a restart's resync of every instance) after they
//! are freed. Trimming when no reconcile has run for a moment returns them
//! (measured: docs/benchmarks.md, "Heap trimming"). The image ships
//! Debian 12's glibc (docs/image.md), byte for byte the libc of the machine
//! that measured it; on another libc this compiles to nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// How long no reconcile must run before freed memory is returned: a burst's
/// reconciles follow each other closer than this.
const QUIET: Duration = Duration::from_millis(200);

/// Counts running reconciles and trims the heap when they drain.
#[derive(Default)]
pub struct Trimmer {
    in_flight: AtomicUsize,
    drained: Notify,
}

/// Held while a reconcile runs.
pub struct Busy(Arc<Trimmer>);

impl Trimmer {
    /// Marks a reconcile as running until the guard drops.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// A burst that is not a reconcile (the watches' initial lists) is over.
    pub fn settled(&self) {
        self.drained.notify_one();
    }

    /// Trims after each quiet moment; runs for the life of the process.
    pub async fn run(self: Arc<Self>) {
        loop {
            self.drained.notified().await;
            tokio::time::sleep(QUIET).await;
            if self.in_flight.load(Ordering::Acquire) == 0 {
                release_freed();
            }
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_one();
        }
    }
}

/// Returns free heap pages to the kernel (glibc only).
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks malloc's own free lists, under its locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_drained_burst_is_noticed_and_a_running_reconcile_holds_it_off() {
        let t = Arc::new(Trimmer::default());
        let first = t.busy();
        let second = t.busy();
        drop(first);
        assert_eq!(t.in_flight.load(Ordering::Acquire), 1, "one reconcile still runs");
        drop(second);
        assert_eq!(t.in_flight.load(Ordering::Acquire), 0);
        // The last guard left a wake-up behind for the trimming loop.
        tokio::time::timeout(Duration::from_secs(1), t.drained.notified())
            .await
            .expect("draining notifies the trimmer");
    }
}
