//! Every instance ranks a caller the same: the cohort of a caller key is a function of the
//! key, the shared salt and rotation, and the wall-clock time, and nothing else, so that
//! separately built instances agree for any salt and epoch; and a priority computed once at
//! the edge survives the trip through the `tidegate-priority` header to every later hop.

use proptest::prelude::*;
use tidegate_core::priority::{COHORTS, CohortMap};
use tidegate_core::{Nanos, Priority, Time};

/// An instance's map, built from its own copy of the configuration: as a proxy reads it from
/// its file where TOML can hold the salt (TOML integers are signed 64-bit), else directly.
fn instance(salt: u64, rotation: Nanos) -> CohortMap {
    if i64::try_from(salt).is_err() {
        return CohortMap { rotation, salt };
    }
    let toml = format!("salt = {salt}\nrotation = \"{rotation}\"");
    toml::from_str(&toml).unwrap_or_else(|e| panic!("{toml}: {e}"))
}

proptest! {
    #[test]
    fn instances_agree_for_any_salt_and_epoch(
        key in proptest::collection::vec(any::<u8>(), 0..40),
        salt in any::<u64>(),
        rotation_ms in 1u64..=86_400_000,
        wall in any::<u64>(),
        instances in 2usize..6,
    ) {
        let rotation = Nanos::from_millis(rotation_ms);
        let wall = Time::from_nanos(wall);
        let edge = instance(salt, rotation);
        let (cohort, until) = edge.cohort_until(&key, wall);
        prop_assert!(cohort < COHORTS);
        for _ in 1..instances {
            let other = instance(salt, rotation);
            prop_assert_eq!(other.cohort(&key, wall), cohort);
            // A later reading in the same epoch (an instance whose clock is behind the
            // edge's by less than the time to the key's next boundary) agrees as well.
            let last = Time::from_nanos(until.as_nanos().saturating_sub(1).max(wall.as_nanos()));
            prop_assert_eq!(other.cohort(&key, last), cohort);
        }
    }

    #[test]
    fn the_edge_priority_survives_the_header_to_every_hop(
        tier in 0u32..6,
        key in any::<u64>(),
        salt in any::<u64>(),
        wall in any::<u64>(),
        hops in 1usize..5,
    ) {
        let map = CohortMap { rotation: Nanos::from_secs(600), salt };
        let cohort = map.cohort(&key.to_le_bytes(), Time::from_nanos(wall));
        let edge = Priority::new(tier, u32::from(cohort)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut header = edge.to_string();
        for _ in 0..hops {
            let at_hop: Priority = header.parse().map_err(|e: tidegate_core::priority::ParsePriorityError| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(at_hop, edge);
            prop_assert_eq!(at_hop.rank(), edge.rank());
            header = at_hop.to_string();
        }
    }
}
