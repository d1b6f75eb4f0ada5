//! The policy grammar: a rule is an algorithm's name (its command's, without `RL.`) and
//! the parameters its command takes after the key ([`super::params`]).

use std::sync::Arc;

use super::params::{
    self, AlgorithmCommand, GCRA_PARAMS, LEAKY_BUCKET_PARAMS, TOKEN_BUCKET_PARAMS, WARMUP_PARAMS,
    WINDOW_PARAMS,
};
use super::syntax::{render, Arg, Kind};
use super::Cursor;
use crate::error::{quote, Error};
use algorithms::fixed_window::FixedWindow;
use algorithms::gcra::Gcra;
use algorithms::leaky_bucket::LeakyBucket;
use algorithms::rule_set::{Rule, Rules, MAX_RULES};
use algorithms::sliding_log::SlidingLog;
use algorithms::sliding_window::SlidingWindow;
use algorithms::token_bucket::TokenBucket;
use algorithms::warmup::Warmup;

/// A rule's parser: its positional arguments, whether its flag (`INTERVAL`) was given, and
/// the largest SLIDINGLOG limit.
type Parse = fn(&[&[u8]], bool, u64) -> Result<Rule, Error>;

/// An algorithm a rule can name.
struct RuleAlgorithm {
    /// Its command's name (`RL.GCRA`), which the rule takes without `RL.`.
    command: &'static str,
    /// The parameters its command takes after the key, which the rule takes after its name.
    params: &'static [Arg],
    parse: Parse,
}

impl RuleAlgorithm {
    const fn of<A: AlgorithmCommand>(params: &'static [Arg], parse: Parse) -> RuleAlgorithm {
        RuleAlgorithm {
            command: A::NAME,
            params,
            parse,
        }
    }

    /// The rule's name, as RL.POLICY.GET shows it (`GCRA`).
    fn name(&self) -> &'static str {
        self.command.strip_prefix("RL.").unwrap_or(self.command)
    }

    /// The rule's syntax after its name, as its arity error shows it.
    fn usage(&self) -> String {
        render(self.params)
    }

    /// How many positional arguments the rule takes.
    fn positional(&self) -> usize {
        self.params.iter().filter(|a| !a.optional).count()
    }

    /// The options with a value the rule may add after them (`COLDFACTOR`).
    fn valued(&self) -> impl Iterator<Item = &'static str> {
        self.params.iter().filter_map(|a| match a.kind {
            Kind::Token => None,
            _ if a.optional => a.token_str,
            _ => None,
        })
    }

    /// The words the rule may add after them (`INTERVAL`).
    fn flags(&self) -> impl Iterator<Item = &'static str> {
        self.params.iter().filter_map(|a| match a.kind {
            Kind::Token if a.optional => a.token_str,
            _ => None,
        })
    }
}

/// Each algorithm a rule can name.
static RULES: [RuleAlgorithm; 7] = [
    RuleAlgorithm::of::<Gcra>(GCRA_PARAMS, |a, _, _| {
        params::gcra(counted(a)?).map(Rule::Gcra)
    }),
    RuleAlgorithm::of::<TokenBucket>(TOKEN_BUCKET_PARAMS, |a, interval, _| {
        params::token_bucket(counted(a)?, interval).map(Rule::TokenBucket)
    }),
    RuleAlgorithm::of::<LeakyBucket>(LEAKY_BUCKET_PARAMS, |a, _, _| {
        params::leaky_bucket(counted(a)?).map(Rule::LeakyBucket)
    }),
    RuleAlgorithm::of::<FixedWindow>(WINDOW_PARAMS, |a, _, _| {
        params::fixed_window(counted(a)?).map(Rule::FixedWindow)
    }),
    RuleAlgorithm::of::<SlidingWindow>(WINDOW_PARAMS, |a, _, _| {
        params::sliding_window(counted(a)?).map(Rule::SlidingWindow)
    }),
    RuleAlgorithm::of::<SlidingLog>(WINDOW_PARAMS, |a, _, log_max| {
        params::sliding_log(counted(a)?, log_max).map(Rule::SlidingLog)
    }),
    RuleAlgorithm::of::<Warmup>(WARMUP_PARAMS, |a, _, _| {
        params::warmup_rule(a).map(Rule::Warmup)
    }),
];

/// A rule's positional arguments, which [`parse`] counted before handing them over (a
/// different count is a bug).
fn counted<'a, 'b, const N: usize>(a: &'b [&'a [u8]]) -> Result<&'b [&'a [u8]; N], Error> {
    a.try_into().map_err(|_| Error::Panic)
}

/// Parses the rest of the arguments as rules: each an algorithm name (`GCRA` or `RL.GCRA`,
/// any case) and its positional arguments, then its option with a value if given
/// (`COLDFACTOR factor` for WARMUP), then the words its command takes alone (`INTERVAL` for
/// TOKENBUCKET). `log_max` bounds a SLIDINGLOG limit. Returns the rules and their words as
/// RL.POLICY.GET shows them (the algorithm upper case); the cursor's arity error when there
/// is no rule.
pub fn parse(a: &mut Cursor, log_max: u64) -> Result<Parsed, Error> {
    let mut rules = Vec::new();
    let mut canonical = Vec::with_capacity(a.remaining());
    let mut shadow = 0u32;
    loop {
        let mut position = a.position();
        let Some(mut word) = a.optional() else {
            break;
        };
        if word.eq_ignore_ascii_case(b"SHADOW") {
            let Some(next) = a.optional() else {
                return Err(Error::ShadowWithoutRule { position });
            };
            shadow |= 1 << rules.len().min(MAX_RULES);
            canonical.push(b"SHADOW".to_vec());
            position += 1;
            word = next;
        }
        let bare = word
            .get(..3)
            .filter(|prefix| prefix.eq_ignore_ascii_case(b"RL."))
            .map_or(word, |_| &word[3..]);
        let Some(algorithm) = RULES
            .iter()
            .find(|r| r.name().as_bytes().eq_ignore_ascii_case(bare))
        else {
            return Err(Error::UnknownRule {
                position,
                token: quote(word),
            });
        };
        if rules.len() == MAX_RULES {
            return Err(Error::TooManyRules { max: MAX_RULES });
        }
        let name = algorithm.name();
        let positional = algorithm.positional();
        let mut n = positional;
        // An option with a value (`COLDFACTOR factor`) goes to the parser with the positional
        // arguments; the parser says when its value is missing.
        if a.peek(n).is_some_and(|w| {
            algorithm
                .valued()
                .any(|v| w.eq_ignore_ascii_case(v.as_bytes()))
        }) {
            n = (n + 2).min(a.remaining());
        }
        let words = a.take(n).ok_or_else(|| Error::RuleArity {
            position,
            algorithm: name,
            usage: algorithm.usage(),
        })?;
        let flag = algorithm.flags().find(|flag| {
            a.peek(0)
                .is_some_and(|w| w.eq_ignore_ascii_case(flag.as_bytes()))
        });
        if flag.is_some() {
            a.optional();
        }
        let rule =
            (algorithm.parse)(words, flag.is_some(), log_max).map_err(|inner| Error::InRule {
                position,
                algorithm: name,
                inner: Box::new(inner),
            })?;
        rules.push(rule);
        canonical.push(name.as_bytes().to_vec());
        // The option's word upper case, as the algorithm's name is.
        canonical.extend(
            words
                .iter()
                .enumerate()
                .map(|(j, w)| match j == positional {
                    true => w.to_ascii_uppercase(),
                    false => w.to_vec(),
                }),
        );
        if let Some(flag) = flag {
            canonical.push(flag.as_bytes().to_vec());
        }
    }
    if rules.is_empty() {
        return Err(a.arity());
    }
    if shadow.count_ones() as usize == rules.len() {
        return Err(Error::OnlyShadowRules);
    }
    Ok(Parsed {
        rules: Arc::from(rules),
        shadow,
        words: canonical,
    })
}

/// A policy's rules as parsed.
#[derive(Debug)]
pub struct Parsed {
    pub rules: Rules,
    /// Bit `i` set: rule `i` is a shadow rule (`SHADOW` before it).
    pub shadow: u32,
    /// The words as RL.POLICY.GET shows them (algorithm names upper case, `SHADOW` kept).
    pub words: Vec<Vec<u8>>,
}

/// What loading needs from the grammar: the rules and their shadow marks, with `log_max` the
/// largest SLIDINGLOG limit any setting allows (a saved policy was valid when it was set).
/// The marks are words of the policy, so the saved form is the one it always was.
pub fn parse_saved(words: &[&[u8]], log_max: u64) -> Option<(Rules, u32)> {
    parse(&mut Cursor::over(words), log_max)
        .ok()
        .map(|parsed| (parsed.rules, parsed.shadow))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_take_the_positional_arguments_and_flags() {
        let expected: [(&str, &str, usize, &[&str]); 7] = [
            ("GCRA", "burst rate period", 3, &[]),
            (
                "TOKENBUCKET",
                "capacity refill_amount refill_period [INTERVAL]",
                3,
                &["INTERVAL"],
            ),
            ("LEAKYBUCKET", "capacity leak_amount leak_period", 3, &[]),
            ("FIXEDWINDOW", "limit window", 2, &[]),
            ("SLIDINGWINDOW", "limit window", 2, &[]),
            ("SLIDINGLOG", "limit window", 2, &[]),
            ("WARMUP", "rate period warmup [COLDFACTOR factor]", 3, &[]),
        ];
        for (rule, (name, usage, n, flags)) in RULES.iter().zip(expected) {
            assert_eq!(rule.name(), name);
            assert_eq!(rule.usage(), usage, "{name}");
            assert_eq!(rule.positional(), n, "{name}");
            assert_eq!(rule.flags().collect::<Vec<_>>(), flags);
        }
        let valued = |name| RULES.iter().find(|r| r.name() == name).unwrap().valued();
        assert_eq!(valued("WARMUP").collect::<Vec<_>>(), ["COLDFACTOR"]);
        assert_eq!(valued("TOKENBUCKET").count(), 0);
    }
}
