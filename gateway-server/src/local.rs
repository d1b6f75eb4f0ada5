//! The local budgets' side that waits and sends (the library's `budget` keeps their state and
//! arithmetic): the budgets behind one lock, the clock they read, the wake-up of the requests
//! waiting for a key's refill, and the sweeper, a task that gives back the units due (at
//! `hold / 2` after their refill) with `RL.REFUND`, and all of them at shutdown.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gateway::budget::Budgets;
use tokio::sync::Notify;

pub struct Local {
    budgets: Mutex<Budgets>,
    /// Woken when a refill is back (or was not sent): the requests waiting for one ask again.
    pub refilled: Notify,
    /// Woken when a refill added units (a new deadline for the sweeper).
    pub wake: Notify,
    epoch: Instant,
}

impl Local {
    pub fn new() -> Local {
        Local {
            budgets: Mutex::new(Budgets::new()),
            refilled: Notify::new(),
            wake: Notify::new(),
            epoch: Instant::now(),
        }
    }

    /// The budgets' clock: µs since the service started (monotonic).
    pub fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The budgets, locked (never across an await).
    pub fn lock(&self) -> MutexGuard<'_, Budgets> {
        self.budgets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The refunds due now (every unit held, with `everything`), and how long until the next.
    pub fn due(&self, everything: bool) -> (Vec<(String, u64)>, Option<Duration>) {
        let mut budgets = self.lock();
        let now = self.now();
        let due = budgets.collect(now, everything);
        let next = budgets
            .next_deadline()
            .map(|t| Duration::from_micros(t.saturating_sub(now)));
        (due, next)
    }
}
