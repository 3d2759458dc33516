//! Value types that check themselves while being parsed, so that a bad value is reported by
//! the parser with its key and line rather than later without either.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A finite, non-negative number (a rate, a weight, a factor).
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct NonNegative(f64);

impl NonNegative {
    /// `v` if it is finite and at least 0.
    pub fn new(v: f64) -> Option<NonNegative> {
        (v.is_finite() && v >= 0.0).then_some(NonNegative(v))
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

impl fmt::Display for NonNegative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for NonNegative {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for NonNegative {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<NonNegative, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = NonNegative;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a finite number of at least 0")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<NonNegative, E> {
                if v.is_finite() && v >= 0.0 {
                    Ok(NonNegative(v))
                } else {
                    Err(E::custom(format!(
                        "expected a finite number of at least 0, found {v}"
                    )))
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<NonNegative, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<NonNegative, E> {
                self.visit_f64(v as f64)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}
