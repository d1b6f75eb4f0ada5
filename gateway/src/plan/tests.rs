use super::*;

const MESSAGING: &str = "
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5, name: per_number}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: gcra, burst: 20}
  - key: wide
    rate_limit: {unit: hour, requests_per_unit: 9, replaces: [{name: per_number}]}
";

fn rules() -> Rules {
    Rules::load([("config.messaging.yaml", MESSAGING)], false).unwrap()
}

fn descriptor(entries: &[(&str, &str)]) -> Descriptor {
    Descriptor {
        entries: entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Descriptor::default()
    }
}

fn request(descriptors: Vec<Descriptor>) -> Request {
    Request {
        domain: "messaging".into(),
        descriptors,
        hits_addend: 0,
    }
}

fn call(step: &Step) -> (&Rule, &str, u64) {
    match step {
        Step::Call { rule, key, hits } => (rule, key, *hits),
        other => panic!("not a call: {other:?}"),
    }
}

#[test]
fn the_readmes_example_2_is_two_calls() {
    let r = rules();
    let req = request(vec![
        descriptor(&[("message_type", "marketing"), ("to_number", "2061111111")]),
        descriptor(&[("to_number", "2061111111")]),
    ]);
    let steps = plan(Some(&r), &req, "pre_").unwrap();
    let (rule, key, hits) = call(&steps[0]);
    assert_eq!(
        key,
        "pre_messaging_message_type_marketing_to_number_2061111111_day"
    );
    assert_eq!(hits, 1);
    assert_eq!(rule.stats_key, "messaging.message_type_marketing.to_number");
    assert_eq!(rule.name.as_deref(), Some("per_number"));
    assert_eq!(
        rule.command(key, hits),
        [
            "RL.FIXEDWINDOW",
            "pre_messaging_message_type_marketing_to_number_2061111111_day",
            "5",
            "86400s",
            "COST",
            "1"
        ]
    );
    let (rule, key, _) = call(&steps[1]);
    assert_eq!(key, "pre_messaging_to_number_2061111111_day");
    assert_eq!(rule.requests_per_unit, 100);
}

#[test]
fn no_rule_unlimited_blocked_replaced_and_unknown_domains() {
    let r = rules();
    let req = request(vec![
        descriptor(&[("nothing", "here")]),
        descriptor(&[("ldap", "x")]),
        descriptor(&[("blocked", "x")]),
        descriptor(&[("message_type", "marketing"), ("to_number", "1")]),
        descriptor(&[("wide", "y")]),
    ]);
    let steps = plan(Some(&r), &req, "").unwrap();
    assert_eq!(steps[0], Step::NoLimit);
    assert_eq!(steps[1], Step::Unlimited);
    assert!(matches!(&steps[2], Step::Blocked { hits: 1, .. }));
    assert_eq!(steps[3], Step::NoLimit, "replaced by the `wide` rule");
    assert_eq!(call(&steps[4]).1, "messaging_wide_y_hour");
    let other = Request {
        domain: "other".into(),
        ..req.clone()
    };
    assert_eq!(plan(Some(&r), &other, "").unwrap(), vec![Step::NoLimit; 5]);
}

#[test]
fn the_request_errors_in_that_services_order() {
    let r = rules();
    let empty = Request::default();
    assert_eq!(plan(None, &empty, ""), Err(RequestError::EmptyDomain));
    let no_descriptors = request(vec![]);
    assert_eq!(
        plan(None, &no_descriptors, ""),
        Err(RequestError::NoDescriptors)
    );
    let one = request(vec![descriptor(&[("k", "v")])]);
    assert_eq!(plan(None, &one, ""), Err(RequestError::NoRules));
    assert_eq!(
        RequestError::NoRules.to_string(),
        "no rate limit configuration loaded"
    );
    let mut bad = one.clone();
    bad.descriptors[0].limit = Some((5, 0));
    assert_eq!(plan(Some(&r), &bad, ""), Err(RequestError::BadUnit(0)));
}

#[test]
fn envoys_own_limit_wins_where_the_domain_is_known() {
    let r = rules();
    let mut d = descriptor(&[("to_number", "1"), ("x", "")]);
    d.limit = Some((7, 2));
    d.hits_addend = Some(0);
    let req = Request {
        hits_addend: 3,
        ..request(vec![d])
    };
    let steps = plan(Some(&r), &req, "").unwrap();
    let (rule, key, hits) = call(&steps[0]);
    assert_eq!((rule.requests_per_unit, rule.unit), (7, Unit::Minute));
    assert_eq!(rule.stats_key, "messaging.to_number_1.x");
    assert_eq!(key, "messaging_to_number_1_x__minute");
    assert_eq!(hits, 0, "the descriptor's own hits_addend, even 0");
}

#[test]
fn every_algorithm_is_its_command() {
    let r = rules();
    let steps = plan(
        Some(&r),
        &request(vec![descriptor(&[("shadowed", "a")])]),
        "",
    )
    .unwrap();
    let (rule, key, _) = call(&steps[0]);
    assert_eq!(key, "messaging_shadowed_a_minute_gcra");
    assert!(rule.shadow_mode);
    assert_eq!(
        rule.command(key, 2)[..5],
        ["RL.GCRA", key, "20", "10", "60s"]
    );
    assert_eq!(
        rule.window_seconds(),
        120,
        "20 at 10 a minute come back in 2 minutes"
    );
    let mut rule = rule.clone();
    for (algorithm, name, params) in [
        (Algorithm::TokenBucket, "RL.TOKENBUCKET", 3),
        (Algorithm::LeakyBucket, "RL.LEAKYBUCKET", 3),
        (Algorithm::SlidingWindow, "RL.SLIDINGWINDOW", 2),
        (Algorithm::SlidingLog, "RL.SLIDINGLOG", 2),
        (Algorithm::FixedWindow, "RL.FIXEDWINDOW", 2),
    ] {
        rule.algorithm = algorithm;
        let args = rule.command("k", 4);
        assert_eq!(args[0], name);
        assert_eq!(args.len(), 2 + params + 2);
        assert_eq!(args[args.len() - 2..], ["COST", "4"]);
    }
}

fn decided(allowed: bool, limit: u64, remaining: u64) -> Decision {
    Decision {
        allowed,
        limit,
        remaining,
        retry_after_ms: if allowed { 0 } else { 1500 },
        reset_after_ms: 40_500,
    }
}

#[test]
fn a_refused_request_gives_back_what_the_others_took() {
    let r = rules();
    let req = request(vec![
        descriptor(&[("message_type", "marketing"), ("to_number", "1")]),
        descriptor(&[("to_number", "1")]),
        descriptor(&[("ldap", "x")]),
    ]);
    let steps = plan(Some(&r), &req, "").unwrap();
    let replies = [
        Some(decided(false, 5, 0)),
        Some(decided(true, 100, 94)),
        None,
    ];
    let answer = answer(&steps, &replies, false);
    assert_eq!(answer.overall, Code::OverLimit);
    assert!(answer.refused);
    assert_eq!(answer.statuses[0].code, Code::OverLimit);
    assert_eq!(answer.statuses[0].reset_seconds, Some(41));
    assert_eq!(answer.statuses[1].remaining, 94);
    assert_eq!(answer.statuses[2].remaining, u32::MAX);
    let back = refunds(&steps, &replies);
    assert_eq!(
        back,
        vec![(
            1,
            vec![
                "RL.REFUND".into(),
                "messaging_to_number_1_day".into(),
                "1".into()
            ]
        )]
    );
    let mut s = answer.statuses[1].clone();
    refunded(&mut s, 1);
    assert_eq!(s.remaining, 95);
    // Global shadow mode: answered OK, and what was taken stays taken.
    let shadow = super::answer(&steps, &replies, true);
    assert_eq!(shadow.overall, Code::Ok);
    assert!(!shadow.refused);
    assert_eq!(shadow.statuses[0].code, Code::OverLimit);
}

#[test]
fn a_refusal_under_a_shadow_rule_refuses_nothing() {
    let r = rules();
    let req = request(vec![
        descriptor(&[("shadowed", "a")]),
        descriptor(&[("to_number", "1")]),
    ]);
    let steps = plan(Some(&r), &req, "").unwrap();
    let replies = [Some(decided(false, 20, 0)), Some(decided(true, 100, 99))];
    let answer = answer(&steps, &replies, false);
    assert_eq!(answer.overall, Code::Ok);
    assert!(!answer.refused);
    assert!(answer.statuses[0].shadow_denied);
    assert_eq!(answer.statuses[0].code, Code::Ok);
}

#[test]
fn the_counters_as_envoyproxy_ratelimit_counts_them() {
    let r = rules();
    let steps = plan(
        Some(&r),
        &request(vec![descriptor(&[("to_number", "1")])]),
        "",
    )
    .unwrap();
    let mut step = steps[0].clone();
    let Step::Call { rule, hits, .. } = &mut step else {
        unreachable!()
    };
    rule.requests_per_unit = 15;
    *hits = 2;
    // Limit 15, near at floor(15 × 0.8) = 12: from 11 to 13 is 1 near.
    let c = counts(&step, Some(&decided(true, 15, 2)), 0.8).unwrap();
    assert_eq!(
        (c.total_hits, c.within_limit, c.near_limit, c.over_limit),
        (2, 2, 1, 0)
    );
    // From 13 to 15, both past 12.
    let c = counts(&step, Some(&decided(true, 15, 0)), 0.8).unwrap();
    assert_eq!((c.within_limit, c.near_limit), (2, 2));
    // Refused at 14 for 2: one over (15 to 16), near from 14 to 15.
    let c = counts(&step, Some(&decided(false, 15, 1)), 0.8).unwrap();
    assert_eq!(
        (c.over_limit, c.near_limit, c.within_limit, c.shadow_mode),
        (1, 1, 0, 0)
    );
    // Refused at the limit: every hit over.
    let c = counts(&step, Some(&decided(false, 15, 0)), 0.8).unwrap();
    assert_eq!((c.over_limit, c.near_limit), (2, 0));
    assert_eq!(counts(&Step::Unlimited, None, 0.8), None);
}

#[test]
fn the_draft_11_fields() {
    let r = rules();
    let req = request(vec![
        descriptor(&[("shadowed", "a")]),
        descriptor(&[("to_number", "1")]),
        descriptor(&[("nothing", "")]),
    ]);
    let steps = plan(Some(&r), &req, "").unwrap();
    let replies = [
        Some(decided(true, 20, 19)),
        Some(decided(true, 100, 94)),
        None,
    ];
    let a = answer(&steps, &replies, false);
    assert_eq!(
        draft11_headers(&steps, &replies, &a.statuses),
        [
            (
                "RateLimit-Policy".to_string(),
                "\"messaging.shadowed\";q=20;w=120, \"messaging.to_number\";q=100;w=86400"
                    .to_string()
            ),
            (
                "RateLimit".to_string(),
                "\"messaging.shadowed\";r=19, \"messaging.to_number\";r=94;t=41".to_string()
            ),
        ]
    );
    // Refused by the second: Retry-After is its wait; the shadow refusal adds none.
    let replies = [
        Some(decided(false, 20, 0)),
        Some(decided(false, 100, 0)),
        None,
    ];
    let a = answer(&steps, &replies, false);
    let h = draft11_headers(&steps, &replies, &a.statuses);
    assert_eq!(
        h[1].1,
        "\"messaging.shadowed\";r=0;t=2, \"messaging.to_number\";r=0;t=2"
    );
    assert_eq!(h[2], ("Retry-After".to_string(), "2".to_string()));
    assert_eq!(sf_string("a\"b\\c\u{7f}"), "\"a\\\"b\\\\c\"");
    assert!(draft11_headers(&steps[2..], &[None], &a.statuses[2..]).is_empty());
}

#[test]
fn prometheus_labels_of_a_stat_name() {
    assert_eq!(
        stat_labels("messaging.to_number"),
        ["messaging", "to_number", ""]
    );
    assert_eq!(
        stat_labels("edge_proxy_per_ip.remote_address_50.0.0.5"),
        ["edge_proxy_per_ip", "remote_address_50_0_0_5", ""]
    );
    assert_eq!(stat_labels("d.a:b|c.k.deeper.still"), ["d", "a_b_c", "k"]);
    assert_eq!(sanitize("x1234.5.6.7.8"), "x1234_5_6_7.8");
    assert_eq!(sanitize("1.2.3.4567"), "1_2_3_4567");
    assert_eq!(sanitize("1.2.3"), "1.2.3");
}
