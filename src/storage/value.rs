//! What a limiter key holds: one algorithm's parameters and state.

use algorithms::concurrency::{self, Concurrency};
use algorithms::fixed_window::FixedWindow;
use algorithms::gcra::Gcra;
use algorithms::leaky_bucket::LeakyBucket;
use algorithms::rule_set::{self, Rule, RuleSet, RuleState};
use algorithms::sliding_log::{self, SlidingLog};
use algorithms::sliding_window::SlidingWindow;
use algorithms::token_bucket::TokenBucket;
use algorithms::warmup::Warmup;
use algorithms::{Algorithm as _, Decision, Snapshot};

use crate::args::AlgorithmCommand;

/// The parameters a key was last written with, and its state under them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored<A: AlgorithmCommand> {
    pub params: A::Params,
    pub state: A::State,
}

/// Ties an algorithm to its variant of [`Value`].
pub trait Variant: AlgorithmCommand + Sized {
    fn get_mut(value: &mut Value) -> Option<&mut Stored<Self>>;
    fn wrap(stored: Stored<Self>) -> Value;
    /// A policy's rules, when these are RL.LIMIT's parameters (the storage layer reads a
    /// policy key's words against them); `None` for every other algorithm (the variant
    /// marked `policy_rules` in the `values!` table says otherwise).
    #[inline(always)]
    fn policy_rules(_params: &Self::Params) -> Option<&rule_set::Rules> {
        None
    }
}

/// Declares [`Value`] with one variant per algorithm, and what each variant needs.
macro_rules! values {
    ($($variant:ident($algorithm:ty) = $kind:literal $(, $rules:ident)?;)*) => {
        /// The value of a key of the module's data type.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Value {
            $($variant(Stored<$algorithm>),)*
        }

        impl Value {
            /// The command that owns this state, as error texts name it.
            pub fn algorithm_name(&self) -> &'static str {
                match self {
                    $(Value::$variant(_) => <$algorithm>::NAME,)*
                }
            }

            /// The algorithm's name as RL.INSPECT reports it.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Value::$variant(_) => $kind,)*
                }
            }

            /// RL.REFUND: [`algorithms::Algorithm::refund`] under the parameters the key was
            /// written with; the units given back (0: nothing changed).
            pub fn refund(&mut self, now_us: u64, units: u64) -> u64 {
                match self {
                    $(Value::$variant(s) => <$algorithm>::refund(&s.params, &mut s.state, now_us, units),)*
                }
            }

            /// The key as of `now_us`, as a request of no units under its own parameters
            /// would see it: a check that does not write, on the state in place (no copy).
            pub fn view_now(&mut self, now_us: u64) -> Decision {
                match self {
                    $(Value::$variant(s) => {
                        <$algorithm>::check(&s.params, Some((&s.params, &mut s.state)), now_us, 0, false).0
                    })*
                }
            }

            /// The parameters and state as of `now_us` (what RL.INSPECT shows).
            pub fn snapshot(&self, now_us: u64) -> Snapshot {
                match self {
                    $(Value::$variant(s) => <$algorithm>::snapshot(&s.params, &s.state, now_us),)*
                }
            }
        }

        $(
            impl Variant for $algorithm {
                fn get_mut(value: &mut Value) -> Option<&mut Stored<Self>> {
                    match value {
                        Value::$variant(s) => Some(s),
                        #[allow(unreachable_patterns)]
                        _ => None,
                    }
                }

                fn wrap(stored: Stored<Self>) -> Value {
                    Value::$variant(stored)
                }

                // RL.LIMIT's parameters are its policy's rules.
                $(
                    #[inline(always)]
                    fn $rules(params: &Self::Params) -> Option<&rule_set::Rules> {
                        Some(params)
                    }
                )?
            }
        )*
    };
}

values! {
    Gcra(Gcra) = "gcra";
    TokenBucket(TokenBucket) = "tokenbucket";
    LeakyBucket(LeakyBucket) = "leakybucket";
    FixedWindow(FixedWindow) = "fixedwindow";
    SlidingWindow(SlidingWindow) = "slidingwindow";
    SlidingLog(SlidingLog) = "slidinglog";
    Concurrency(Concurrency) = "concurrency";
    RuleSet(RuleSet) = "limit", policy_rules;
    Warmup(Warmup) = "warmup";
}

impl Value {
    /// Bytes this value holds, for MEMORY USAGE: the value itself and what it points to.
    pub fn memory(&self) -> usize {
        let heap = match self {
            Value::SlidingLog(s) => sliding_log::heap_bytes(&s.state),
            Value::Concurrency(s) => concurrency::heap_bytes(&s.state),
            Value::RuleSet(s) => rule_set::heap_bytes(&s.params, &s.state),
            _ => 0,
        };
        std::mem::size_of::<Value>() + heap
    }
}

/// Declares the conversions between one rule of a policy with its state and the value a key
/// of that rule's algorithm would hold (the encoding writes a policy's rules as such values).
macro_rules! rule_values {
    ($($variant:ident),*) => {
        impl Value {
            /// The value of a key holding `rule` alone, with `state`; `None` if the state is
            /// not the rule's.
            pub fn from_rule(rule: &Rule, state: &RuleState) -> Option<Value> {
                match (rule, state) {
                    $((Rule::$variant(params), RuleState::$variant(state)) => {
                        Some(Value::$variant(Stored {
                            params: *params,
                            state: state.clone(),
                        }))
                    })*
                    _ => None,
                }
            }

            /// The rule and state this value holds, for an algorithm a policy's rule can use.
            pub fn into_rule(self) -> Option<(Rule, RuleState)> {
                match self {
                    $(Value::$variant(s) => Some((Rule::$variant(s.params), RuleState::$variant(s.state))),)*
                    _ => None,
                }
            }
        }
    };
}

rule_values!(
    Gcra,
    TokenBucket,
    LeakyBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    Warmup
);
