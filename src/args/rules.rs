//! The policy grammar: a rule is an algorithm's name and its command's positional
//! arguments, as the syntax table ([`super::syntax`]) spells them.

use std::sync::Arc;

use super::params;
use super::syntax::{
    Syntax, RL_FIXEDWINDOW, RL_GCRA, RL_LEAKYBUCKET, RL_POLICY_SET, RL_SLIDINGLOG,
    RL_SLIDINGWINDOW, RL_TOKENBUCKET, RL_WARMUP,
};
use crate::error::{quote, Error};
use algorithms::rule_set::{Rule, Rules, MAX_RULES};

/// A rule's parser: its positional arguments, whether its flag (`INTERVAL`) was given, and
/// the largest SLIDINGLOG limit.
type Parse = fn(&[&[u8]], bool, u64) -> Result<Rule, Error>;

/// Each algorithm a rule can name: its command's syntax and its parser.
static RULES: [(&Syntax, Parse); 7] = [
    (&RL_GCRA, |a, _, _| params::gcra(a).map(Rule::Gcra)),
    (&RL_TOKENBUCKET, |a, interval, _| {
        params::token_bucket(a, interval).map(Rule::TokenBucket)
    }),
    (&RL_LEAKYBUCKET, |a, _, _| {
        params::leaky_bucket(a).map(Rule::LeakyBucket)
    }),
    (&RL_FIXEDWINDOW, |a, _, _| {
        params::fixed_window(a).map(Rule::FixedWindow)
    }),
    (&RL_SLIDINGWINDOW, |a, _, _| {
        params::sliding_window(a).map(Rule::SlidingWindow)
    }),
    (&RL_SLIDINGLOG, |a, _, log_max| {
        params::sliding_log(a, log_max).map(Rule::SlidingLog)
    }),
    (&RL_WARMUP, |a, _, _| {
        params::warmup_rule(a).map(Rule::Warmup)
    }),
];

/// Parses rules: each an algorithm name (`GCRA` or `RL.GCRA`, any case) and its positional
/// arguments, then its option with a value if given (`COLDFACTOR factor` for WARMUP), then the
/// words its command takes alone (`INTERVAL` for TOKENBUCKET).
/// `first_position` is the argument number of `words[0]`, for error texts; `log_max` bounds
/// a SLIDINGLOG limit. Returns the rules and their words as RL.POLICY.GET shows them (the
/// algorithm upper case).
pub fn parse(words: &[&[u8]], first_position: usize, log_max: u64) -> Result<Parsed, Error> {
    let mut rules = Vec::new();
    let mut canonical = Vec::with_capacity(words.len());
    let mut shadow = 0u32;
    let mut i = 0;
    while i < words.len() {
        let mut position = first_position + i;
        let mut word = words[i];
        if word.eq_ignore_ascii_case(b"SHADOW") {
            let Some(&next) = words.get(i + 1) else {
                return Err(Error::ShadowWithoutRule { position });
            };
            shadow |= 1 << rules.len().min(MAX_RULES);
            canonical.push(b"SHADOW".to_vec());
            i += 1;
            position += 1;
            word = next;
        }
        let bare = word
            .get(..3)
            .filter(|prefix| prefix.eq_ignore_ascii_case(b"RL."))
            .map_or(word, |_| &word[3..]);
        let Some(&(syntax, parse)) = RULES
            .iter()
            .find(|(syntax, _)| syntax.name.as_bytes()[3..].eq_ignore_ascii_case(bare))
        else {
            return Err(Error::UnknownRule {
                position,
                token: quote(word),
            });
        };
        if rules.len() == MAX_RULES {
            return Err(Error::TooManyRules { max: MAX_RULES });
        }
        let name = &syntax.arity_name()[3..];
        let positional = syntax.rule_positional();
        let mut n = positional;
        // An option with a value (`COLDFACTOR factor`) goes to the parser with the positional
        // arguments; the parser says when its value is missing.
        if words.get(i + 1 + n).is_some_and(|w| {
            syntax
                .rule_valued()
                .any(|v| w.eq_ignore_ascii_case(v.as_bytes()))
        }) {
            n = (n + 2).min(words.len() - i - 1);
        }
        let a = words
            .get(i + 1..i + 1 + n)
            .ok_or_else(|| Error::RuleArity {
                position,
                algorithm: name,
                usage: syntax.rule_usage(),
            })?;
        let flag = syntax.rule_flags().find(|flag| {
            words
                .get(i + 1 + n)
                .is_some_and(|w| w.eq_ignore_ascii_case(flag.as_bytes()))
        });
        let rule = parse(a, flag.is_some(), log_max).map_err(|inner| Error::InRule {
            position,
            algorithm: name,
            inner: Box::new(inner),
        })?;
        rules.push(rule);
        canonical.push(name.as_bytes().to_vec());
        // The option's word upper case, as the algorithm's name is.
        canonical.extend(a.iter().enumerate().map(|(j, w)| match j == positional {
            true => w.to_ascii_uppercase(),
            false => w.to_vec(),
        }));
        i += 1 + n;
        if let Some(flag) = flag {
            canonical.push(flag.as_bytes().to_vec());
            i += 1;
        }
    }
    if rules.is_empty() {
        return Err(RL_POLICY_SET.arity());
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
    parse(words, 0, log_max)
        .ok()
        .map(|parsed| (parsed.rules, parsed.shadow))
}
