//! Independent runs on a few threads, results in the input's order whatever the threads.

use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` of every item, on up to `jobs` threads that take the next item as they finish one (so
/// that a long item does not hold back a share of the others); the results are in `items`'
/// order. A panic in `f` is raised again here.
pub(crate) fn map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let jobs = jobs.clamp(1, items.len().max(1));
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            break;
                        };
                        mine.push((i, f(item)));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_the_order_of_the_items() {
        let items: Vec<u64> = (0..100).collect();
        assert_eq!(
            super::map(&items, 3, |&i| i * 2),
            (0..100).map(|i| i * 2).collect::<Vec<_>>()
        );
        assert_eq!(super::map(&[] as &[u64], 3, |&i| i), Vec::<u64>::new());
    }
}
