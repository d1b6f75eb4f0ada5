//! What a limiter key holds: one algorithm's parameters and state.

use crate::algorithms::{gcra, Algorithm};

/// The parameters a key was last written with, and its state under them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored<A: Algorithm> {
    pub params: A::Params,
    pub state: A::State,
}

/// The value of a key of the module's data type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Gcra(Stored<gcra::Gcra>),
}

impl Value {
    /// The command that owns this state, as error texts name it.
    pub fn algorithm_name(&self) -> &'static str {
        match self {
            Value::Gcra(_) => gcra::Gcra::NAME,
        }
    }

    /// The algorithm's name as RL.INSPECT reports it.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Gcra(_) => "gcra",
        }
    }

    /// RL.INSPECT's fields after the algorithm name.
    pub fn describe(&self, now_us: u64) -> Vec<(&'static str, i64)> {
        match self {
            Value::Gcra(s) => gcra::Gcra::describe(&s.params, &s.state, now_us),
        }
    }
}

/// Ties an algorithm to its variant of [`Value`].
pub trait Variant: Algorithm + Sized {
    fn get_mut(value: &mut Value) -> Option<&mut Stored<Self>>;
    fn wrap(stored: Stored<Self>) -> Value;
}

impl Variant for gcra::Gcra {
    fn get_mut(value: &mut Value) -> Option<&mut Stored<Self>> {
        match value {
            Value::Gcra(s) => Some(s),
        }
    }

    fn wrap(stored: Stored<Self>) -> Value {
        Value::Gcra(stored)
    }
}
