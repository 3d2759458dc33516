//! The caller's side of overload control: what a client does so that its retries and its
//! requests to an overloaded service do not make the overload worse.
//!
//! - [`AdaptiveThrottle`]: Google SRE's client-side adaptive throttling. A client that sees
//!   its backend reject more than it accepts starts rejecting requests itself, before sending
//!   them, with probability `max(0, (requests - K * accepts) / (requests + 1))` over a sliding
//!   window ("Handling Overload", *Site Reliability Engineering*, chapter 21; K = 2).
//! - [`RetryBudget`]: retries at most a fraction of requests (10% by default) plus a small
//!   floor, as Finagle's and gRPC's retry budgets and the SRE book's per-client retry budget:
//!   naive retries multiply the offered load by the number of attempts exactly when the
//!   service can least take it, budgeted ones by at most 1.1.
//! - [`RetryPolicy`]: how many attempts, how long to wait between them (exponential backoff
//!   with jitter), and whether to wait as long as the service's `Retry-After` asks.
//!
//! All of it is sans-IO, as the rest of the core: time is an argument, randomness a seeded
//! [`crate::rng::Rng`], so that `tidegate-tower`'s outbound layer and the simulator's fleet
//! models run the same code.

mod budget;
mod retry;
mod throttle;
mod window;

pub use budget::{RetryBudget, RetryBudgetConfig};
pub use retry::{Backoff, RetryPolicy, parse_retry_after};
pub use throttle::{AdaptiveThrottle, ThrottleConfig};
