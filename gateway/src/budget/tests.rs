use super::*;
use crate::rules::{LocalBudget, Unit};

const MS: u64 = 1000;

fn rule(algorithm: Algorithm, units: u32, hold_ms: u64) -> Rule {
    Rule {
        requests_per_unit: 100,
        unit: Unit::Minute,
        name: None,
        algorithm,
        burst: None,
        shadow_mode: false,
        local_budget: Some(LocalBudget { units, hold_ms }),
        stats_key: "d.k".to_string(),
    }
}

/// The module's reply to `ATMOST`: `granted` taken, `remaining` left, the window's reset.
fn reply(granted: u64, remaining: u64, reset_after_ms: i64) -> (Decision, u64) {
    let allowed = granted > 0;
    let d = Decision {
        allowed,
        limit: 100,
        remaining,
        retry_after_ms: if allowed { 0 } else { 1500 },
        reset_after_ms,
    };
    (d, granted)
}

fn spent(take: Take) -> (Decision, Taken) {
    match take {
        Take::Spent(d, t) => (d, t),
        other => panic!("not spent: {other:?}"),
    }
}

#[test]
fn one_refill_serves_k_then_the_next_refills() {
    let r = rule(Algorithm::Gcra, 5, 60_000);
    let mut b = Budgets::new();
    assert_eq!(b.take("k", &r, 1, 0), Take::Refill(5));
    // A second request while the refill is out waits for it.
    assert_eq!(b.take("k", &r, 1, 10), Take::Wait);
    b.refilled("k", Some(reply(5, 95, 600)), 0, 100);
    assert_eq!(b.stats.held, 5);
    let remaining: Vec<u64> = (0..5)
        .map(|i| spent(b.take("k", &r, 1, 200 + i)).0.remaining)
        .collect();
    assert_eq!(remaining, [99, 98, 97, 96, 95]);
    assert_eq!(b.stats.held, 0);
    assert_eq!(b.take("k", &r, 1, 300), Take::Refill(5));
}

#[test]
fn a_request_of_more_than_is_held_refills_what_is_missing_up_to_k() {
    let r = rule(Algorithm::Gcra, 5, 60_000);
    let mut b = Budgets::new();
    assert_eq!(b.take("k", &r, 1, 0), Take::Refill(5));
    b.refilled("k", Some(reply(5, 95, 600)), 0, 0);
    spent(b.take("k", &r, 3, 0));
    assert_eq!(b.take("k", &r, 3, 0), Take::Refill(3));
}

#[test]
fn unspent_units_are_due_back_half_a_hold_after_the_refill_left() {
    let r = rule(Algorithm::SlidingWindow, 5, 1000);
    let mut b = Budgets::new();
    assert_eq!(b.take("k", &r, 1, 1_000 * MS), Take::Refill(5));
    b.refilled("k", Some(reply(5, 95, 60_000)), 1_000 * MS, 1_002 * MS);
    spent(b.take("k", &r, 1, 1_003 * MS));
    assert_eq!(b.next_deadline(), Some(1_500 * MS));
    assert!(b.collect(1_500 * MS - 1, false).is_empty());
    spent(b.take("k", &r, 1, 1_500 * MS - 1));
    assert_eq!(b.collect(1_500 * MS, false), [("k".to_string(), 3)]);
    assert_eq!((b.stats.held, b.len()), (0, 0));
}

#[test]
fn a_fixed_windows_units_lapse_at_its_end_when_it_comes_within_the_hold() {
    let r = rule(Algorithm::FixedWindow, 5, 1000);
    let mut b = Budgets::new();
    b.take("k", &r, 1, 0);
    // The window ends 800 ms after the refill left: within the hold, so its units are spent
    // until then and dropped there (a refund would count for the next window).
    b.refilled("k", Some(reply(5, 95, 800)), 0, 0);
    spent(b.take("k", &r, 1, 700 * MS));
    spent(b.take("k", &r, 1, 800 * MS - 1));
    assert!(b.collect(800 * MS - 1, false).is_empty());
    assert!(b.collect(800 * MS, false).is_empty());
    assert_eq!((b.stats.expired, b.stats.held), (3, 0));
    // A window ending after the hold: given back at hold / 2, as any.
    b.take("k", &r, 1, 900 * MS);
    b.refilled("k", Some(reply(5, 90, 59_000)), 900 * MS, 900 * MS);
    assert_eq!(b.collect(1_400 * MS, false), [("k".to_string(), 5)]);
}

#[test]
fn a_refill_that_grants_nothing_refuses_the_key_until_its_retry_time() {
    let r = rule(Algorithm::Gcra, 5, 60_000);
    let mut b = Budgets::new();
    b.take("k", &r, 1, 0);
    b.refilled("k", Some(reply(0, 0, 1500)), 0, 0);
    match b.take("k", &r, 1, 1_000 * MS) {
        Take::Denied(d) => assert_eq!(
            (d.allowed, d.remaining, d.retry_after_ms, d.reset_after_ms),
            (false, 0, 500, 500)
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.take("k", &r, 1, 1_500 * MS), Take::Refill(5));
}

#[test]
fn units_put_back_are_spent_again_or_due_when_their_time_passed() {
    let r = rule(Algorithm::Gcra, 4, 1000);
    let mut b = Budgets::new();
    b.take("k", &r, 1, 0);
    b.refilled("k", Some(reply(4, 96, 600)), 0, 0);
    let (_, t) = spent(b.take("k", &r, 2, 0));
    b.put_back(t, 10);
    assert_eq!(b.stats.held, 4);
    assert_eq!(spent(b.take("k", &r, 4, 20)).0.remaining, 96);
    let (_, t) = {
        b.take("k", &r, 1, 20);
        b.refilled("k", Some(reply(4, 92, 600)), 20, 20);
        spent(b.take("k", &r, 3, 30))
    };
    // Put back after their deadline (20 + 500 ms): due back at once.
    b.put_back(t, 600 * MS);
    assert_eq!(b.collect(600 * MS, false), [("k".to_string(), 4)]);
}

#[test]
fn a_changed_rule_gives_back_what_the_old_one_held() {
    let mut b = Budgets::new();
    let old = rule(Algorithm::Gcra, 5, 60_000);
    b.take("k", &old, 1, 0);
    b.refilled("k", Some(reply(5, 95, 600)), 0, 0);
    let mut new = old.clone();
    new.requests_per_unit = 50;
    assert_eq!(b.take("k", &new, 1, 10), Take::Refill(5));
    assert_eq!(b.collect(10, false), [("k".to_string(), 5)]);
}

#[test]
fn at_shutdown_every_unit_held_is_due_and_no_budget_is_left() {
    let r = rule(Algorithm::Gcra, 5, 60_000);
    let mut b = Budgets::new();
    for key in ["a", "b"] {
        b.take(key, &r, 1, 0);
        b.refilled(key, Some(reply(5, 95, 600)), 0, 0);
        spent(b.take(key, &r, 2, 0));
    }
    let mut due = b.collect(10, true);
    due.sort();
    assert_eq!(due, [("a".to_string(), 3), ("b".to_string(), 3)]);
    assert!(b.is_empty());
    assert_eq!(b.stats.held, 0);
}

#[test]
fn a_failed_refill_lets_the_next_request_refill() {
    let r = rule(Algorithm::Gcra, 5, 60_000);
    let mut b = Budgets::new();
    b.take("k", &r, 1, 0);
    b.cancel("k", 0);
    assert_eq!(b.take("k", &r, 1, 0), Take::Refill(5));
    b.cancel("k", 0);
    assert!(b.collect(0, false).is_empty());
    assert!(b.is_empty());
}

/// The rule in `clients/lua/conformance/budget.json` (written by the algorithms crate's
/// model of the local budgets, `algorithms/src/budget_promise.rs`), case by case.
#[test]
fn the_rule_is_the_crates() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../clients/lua/conformance/budget.json"
    );
    let text = std::fs::read_to_string(path).expect("budget.json");
    let cases: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let cases = cases["cases"].as_array().expect("cases");
    assert!(cases.len() > 700, "{} cases", cases.len());
    let number = |case: &serde_json::Value, field: &str| case[field].as_u64().expect(field);
    let differ: Vec<_> = cases
        .iter()
        .filter(|case| {
            let windowed = case["kind"] == "RL.FIXEDWINDOW";
            let hold = number(case, "hold_ms") * MS;
            let got = falls_due(
                windowed,
                number(case, "sent_us"),
                hold,
                number(case, "reset_after_ms"),
            );
            got != (number(case, "due_us"), case["lapses"] == true)
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{} differ, the first: {}",
        differ.len(),
        differ[0]
    );
}
