//! The rules against envoyproxy/ratelimit's README examples 1 to 11 (the project's own files
//! written from them) and its validation errors, text for text.

use super::{drop_replaced, override_stats_key};
use super::{Algorithm, LocalBudget, Rules, Unit};

fn rules(text: &str) -> Rules {
    Rules::load([("config.test.yaml", text)], false).unwrap_or_else(|e| panic!("{e}"))
}

fn refused(text: &str) -> String {
    match Rules::load([("config.bad.yaml", text)], false) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// The rule a descriptor gets: (requests per unit, unit, stat name), or None.
fn rule(
    rules: &Rules,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<(u32, Option<Unit>, String)> {
    let found = rules.domain(domain)?.find(entries)?;
    Some((
        found.limit.requests_per_unit,
        found.limit.unit,
        found.stats_key,
    ))
}

#[test]
fn example_1_a_limit_per_value() {
    let r = rules(
        "domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
",
    );
    assert_eq!(
        rule(&r, "mongo_cps", &[("database", "users")]),
        Some((500, Some(Unit::Second), "mongo_cps.database_users".into()))
    );
    assert_eq!(
        rule(&r, "mongo_cps", &[("database", "default")]).map(|x| x.2),
        Some("mongo_cps.database_default".into())
    );
    assert_eq!(rule(&r, "mongo_cps", &[("database", "other")]), None);
    assert_eq!(rule(&r, "other_domain", &[("database", "users")]), None);
}

#[test]
fn example_2_nested_and_key_only_descriptors_and_their_keys() {
    let r = rules(
        "domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
",
    );
    let d1 = [("message_type", "marketing"), ("to_number", "2061111111")];
    let d2 = [("to_number", "2061111111")];
    assert_eq!(
        rule(&r, "messaging", &d1),
        Some((
            5,
            Some(Unit::Day),
            "messaging.message_type_marketing.to_number".into()
        ))
    );
    assert_eq!(
        rule(&r, "messaging", &d2),
        Some((100, Some(Unit::Day), "messaging.to_number".into()))
    );
    // The keys hold the request's own values: one counter per number, per day.
    let domain = r.domain("messaging").unwrap();
    let day = &(86_400 * 20_000).to_string();
    assert_eq!(
        domain
            .find(&d1)
            .unwrap()
            .cache_key("", "messaging", &d1, day),
        "messaging_message_type_marketing_to_number_2061111111_1728000000"
    );
    assert_eq!(
        domain
            .find(&d2)
            .unwrap()
            .cache_key("pre_", "messaging", &d2, day),
        "pre_messaging_to_number_2061111111_1728000000"
    );
    // The first entry alone reaches a node without a rule: none.
    assert_eq!(
        rule(&r, "messaging", &[("message_type", "marketing")]),
        None
    );
}

#[test]
fn example_3_an_exact_value_beats_the_key_alone() {
    let r = rules(
        "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
",
    );
    assert_eq!(
        rule(&r, "edge_proxy_per_ip", &[("remote_address", "50.0.0.1")]).map(|x| x.0),
        Some(10)
    );
    assert_eq!(
        rule(&r, "edge_proxy_per_ip", &[("remote_address", "50.0.0.5")]),
        Some((
            0,
            Some(Unit::Second),
            "edge_proxy_per_ip.remote_address_50.0.0.5".into()
        ))
    );
}

#[test]
fn example_4_a_rule_applies_where_the_descriptor_ends() {
    let a = rules(
        "domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
",
    );
    let request = [("key", "value"), ("subkey", "subvalue")];
    assert_eq!(rule(&a, "example4", &request), None);
    assert_eq!(rule(&a, "example4", &request[..1]).map(|x| x.0), Some(300));
    let b = rules(
        "domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
",
    );
    assert_eq!(
        rule(&b, "example4", &request),
        Some((300, Some(Unit::Second), "example4.key_value.subkey".into()))
    );
}

#[test]
fn example_5_unlimited() {
    let r = rules(
        "domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
",
    );
    let ldap = r
        .domain("internal")
        .unwrap()
        .find(&[("ldap", "x")])
        .unwrap();
    assert!(ldap.limit.unlimited);
    assert_eq!(ldap.limit.unit, None);
    assert_eq!(
        rule(&r, "internal", &[("azure", "x")]).map(|x| x.0),
        Some(100)
    );
}

#[test]
fn example_6_shadow_mode_on_a_rule() {
    let r = rules(
        "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
",
    );
    let d = r.domain("example6").unwrap();
    let a = d
        .find(&[("service", "auth-service"), ("user", "user-a")])
        .unwrap();
    assert!(a.node.shadow_mode);
    assert_eq!(a.stats_key, "example6.service.user_user-a");
    let b = d
        .find(&[("service", "auth-service"), ("user", "user-b")])
        .unwrap();
    assert!(!b.node.shadow_mode);
    assert_eq!(b.limit.requests_per_unit, 20);
    assert!(d
        .find(&[("service", "auth-service"), ("user", "user-c")])
        .is_none());
}

#[test]
fn example_7_replaces_between_descriptors_of_one_request() {
    let r = rules(
        "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
",
    );
    let d = r.domain("example7").unwrap();
    let first = [("key_1", "value_1"), ("user", "bkthomps")];
    let second = [("key_2", "value_2"), ("user", "bkthomps")];
    // Alone, each has its own.
    let mut alone = [d.find(&first)];
    drop_replaced(&mut alone);
    assert_eq!(
        alone[0].as_ref().map(|f| f.limit.requests_per_unit),
        Some(5)
    );
    // Together, the second replaces the first.
    let mut both = [d.find(&first), d.find(&second)];
    drop_replaced(&mut both);
    assert!(both[0].is_none());
    assert_eq!(
        both[1].as_ref().map(|f| f.limit.requests_per_unit),
        Some(10)
    );
}

#[test]
fn example_8_detailed_metric() {
    let r = rules(
        "domain: example8
descriptors:
  - key: key1
    rate_limit:
      unit: minute
      requests_per_unit: 10
    detailed_metric: true
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    assert_eq!(
        rule(&r, "example8", &[("key1", "unspecified_value")]),
        Some((
            10,
            Some(Unit::Minute),
            "example8.key1_unspecified_value".into()
        ))
    );
    assert_eq!(
        rule(&r, "example8", &[("key1", "unspecified_value2")]).map(|x| x.2),
        Some("example8.key1_unspecified_value2".into())
    );
    assert_eq!(
        rule(&r, "example8", &[("key1", "value1")]),
        Some((20, Some(Unit::Minute), "example8.key1_value1".into()))
    );
}

#[test]
fn example_9_wildcards() {
    let r = rules(
        "domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    for value in ["value1", "value2", "valueXYZ", "value"] {
        assert_eq!(
            rule(&r, "example9", &[("key1", value)]).map(|x| x.2),
            Some("example9.key1_value*".into()),
            "{value}"
        );
    }
    assert_eq!(rule(&r, "example9", &[("key1", "other")]), None);
    assert!(rule(&r, "example9", &[("path", "/api/123/action")]).is_some());
    assert_eq!(rule(&r, "example9", &[("path", "/api/123/other")]), None);
    assert!(rule(&r, "example9", &[("route", "/api/v1/resource/123/action")]).is_some());
    assert_eq!(
        rule(&r, "example9", &[("route", "/api/v1/resource/action")]),
        None
    );
    // Each value its own counter: the key holds the value, not the pattern.
    let d = r.domain("example9").unwrap();
    let e = [("key1", "value1")];
    assert_eq!(
        d.find(&e).unwrap().cache_key("", "example9", &e, "60"),
        "example9_key1_value1_60"
    );
}

#[test]
fn example_10_value_to_metric() {
    let r = rules(
        "domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
",
    );
    assert_eq!(
        rule(
            &r,
            "example10",
            &[
                ("route", "api"),
                ("http_method", "GET"),
                ("subject_id", "123")
            ]
        ),
        Some((
            60,
            Some(Unit::Minute),
            "example10.route_api.http_method_GET.subject_id".into()
        ))
    );
    let w = rules(
        "domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
",
    );
    assert_eq!(
        rule(
            &w,
            "example10_wildcard",
            &[
                ("user", "alice"),
                ("action", "readfile"),
                ("resource", "documents")
            ]
        )
        .map(|x| x.2),
        Some("example10_wildcard.user_alice.action_readfile.resource".into())
    );
}

#[test]
fn example_11_share_threshold() {
    let r = rules(
        "domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    rate_limit:
      unit: hour
      requests_per_unit: 10
",
    );
    let d = r.domain("example11").unwrap();
    let (a, b) = ([("files", "files/a.pdf")], [("files", "files/b.csv")]);
    let ka = d.find(&a).unwrap().cache_key("", "example11", &a, "3600");
    assert_eq!(ka, "example11_files_files/*_3600");
    assert_eq!(
        d.find(&b).unwrap().cache_key("", "example11", &b, "3600"),
        ka
    );
    let (c, e) = (
        [("files_no_share", "files_no_share/a.pdf")],
        [("files_no_share", "files_no_share/b.csv")],
    );
    assert_ne!(
        d.find(&c).unwrap().cache_key("", "example11", &c, "3600"),
        d.find(&e).unwrap().cache_key("", "example11", &e, "3600")
    );
    let m = rules(
        "domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
",
    );
    assert_eq!(
        rule(
            &m,
            "example11_metrics",
            &[("route", "api/v1"), ("method", "GET")]
        )
        .map(|x| x.2),
        Some("example11_metrics.route_api/*.method".into())
    );
}

#[test]
fn a_requests_own_limit_is_named_by_its_entries() {
    assert_eq!(
        override_stats_key(
            "test-domain",
            &[("key1", "value1"), ("subkey1", "something"), ("k", "")]
        ),
        "test-domain.key1_value1.subkey1_something.k"
    );
}

#[test]
fn units_second_to_year_in_any_case() {
    for (word, unit, seconds) in [
        ("second", Unit::Second, 1),
        ("MINUTE", Unit::Minute, 60),
        ("Hour", Unit::Hour, 3_600),
        ("day", Unit::Day, 86_400),
        ("week", Unit::Week, 604_800),
        ("month", Unit::Month, 2_592_000),
        ("year", Unit::Year, 31_536_000),
    ] {
        let r = rules(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: {word}\n      requests_per_unit: 1\n"
        ));
        let found = r.domain("d").unwrap().find(&[("k", "v")]).unwrap();
        assert_eq!(found.limit.unit, Some(unit), "{word}");
        assert_eq!(unit.seconds(), seconds);
    }
}

#[test]
fn the_algorithm_extension() {
    let r = rules(
        "domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 20}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 5}
",
    );
    let d = r.domain("d").unwrap();
    let a = d.find(&[("a", "")]).unwrap();
    assert_eq!(
        (a.limit.algorithm, a.limit.burst),
        (Algorithm::Gcra, Some(20))
    );
    let b = d.find(&[("b", "x")]).unwrap();
    assert_eq!(
        (b.limit.algorithm, b.limit.burst),
        (Algorithm::SlidingWindow, None)
    );
    assert_eq!(
        d.find(&[("c", "x")]).unwrap().limit.algorithm,
        Algorithm::FixedWindow
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: lottery}\n"),
        "config.bad.yaml: invalid rate limit algorithm 'lottery': one of fixed_window, gcra, token_bucket, leaky_bucket, sliding_window, sliding_log"
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n"),
        "config.bad.yaml: burst is for gcra, token_bucket and leaky_bucket, at least 1; not for fixed_window"
    );
}

#[test]
fn the_local_budget_extension() {
    let r = rules(
        "domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1000, local_budget: 50}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 100, local_budget: 10, hold: 2s}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 100, local_budget: 10, hold: 40}
",
    );
    let d = r.domain("d").unwrap();
    let budget = |k| d.find(&[(k, "x")]).unwrap().limit.local_budget;
    // Without `hold:`, a quarter of the unit; a bare number is ms.
    assert_eq!(
        [budget("a"), budget("b"), budget("c")],
        [(50, 15_000), (10, 2_000), (10, 40)]
            .map(|(units, hold_ms)| Some(LocalBudget { units, hold_ms }))
    );
    let bad = |extra: &str| {
        refused(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: second, requests_per_unit: 1{extra}}}\n"
        ))
    };
    assert_eq!(
        bad(", local_budget: 0"),
        "config.bad.yaml: local_budget is the units taken at once: at least 1"
    );
    assert_eq!(
        bad(", hold: 1s"),
        "config.bad.yaml: hold is how long a local budget's units are kept: give it with local_budget"
    );
    for hold in ["1w", "0", "05s", "-1s", "1.5s", "11000d"] {
        assert_eq!(
            bad(&format!(", local_budget: 2, hold: '{hold}'")),
            format!("config.bad.yaml: invalid hold '{hold}': a duration from 1ms to 10 years, such as 250ms, 2s, 1m, 1h or 1d (a bare number is ms)")
        );
    }
    assert!(bad(", local_budget: -1").contains("local_budget"));
}

#[test]
fn the_validation_errors_are_envoyproxy_ratelimits() {
    let cases: &[(&str, &str)] = &[
        (
            "domain: d\ndescriptors:\n  - key: a\n    ratelimit:\n      unit: second\n",
            "config error, unknown key 'ratelimit'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requestsperunit: 5\n",
            "config error, unknown key 'requestsperunit'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
            "invalid rate limit unit 'foo'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 5\n",
            "invalid rate limit unit ''",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: unknown\n      requests_per_unit: 5\n",
            "invalid rate limit unit 'unknown'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n",
            "should not specify rate limit unit when unlimited",
        ),
        ("descriptors:\n  - key: a\n", "config file cannot have empty domain"),
        ("domain: \"\"\n", "config file cannot have empty domain"),
        ("domain: d\ndescriptors:\n  - value: v\n", "descriptor has empty key"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
            "duplicate descriptor composite key 'd.k_v'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a_b\n  - key: a\n    value: b\n",
            "duplicate descriptor composite key 'd.a_b'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: s\n      - key: s\n",
            "duplicate descriptor composite key 'd.k.s'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n",
            "should not have an empty replaces entry",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: me\n",
            "replaces should not contain name of same descriptor",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: plain\n    share_threshold: true\n",
            "share_threshold can only be used with wildcard values (containing '*'), but found key 'a_plain'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1.5\n",
            "error checking config",
        ),
        ("domain: d\ndescriptors:\n  - a\n", "config error, yaml file contains list of type other than map: a"),
        ("domain: d\n0.25: x\n", "config error, key is not of type string: 0.25"),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
            "error loading config file: yaml: unmarshal errors:\n  cannot unmarshal !!int `-1` into uint32 (requests_per_unit)",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(refused(text), format!("config.bad.yaml: {want}"), "{text}");
    }
    assert_eq!(
        refused("domain: \"d\n"),
        "config.bad.yaml: error loading config file: yaml: line 2: found unexpected end of stream"
    );
    assert_eq!(
        refused("- a\n- b\n"),
        "config.bad.yaml: error loading config file: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[interface {}]interface {}"
    );
}

#[test]
fn two_files_of_one_domain_unless_merged() {
    let a = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let b = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
    let err = Rules::load([("config.a.yaml", a), ("config.b.yaml", b)], false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "config.b.yaml: duplicate domain 'd' in config file"
    );
    let merged = Rules::load([("config.a.yaml", a), ("config.b.yaml", b)], true).unwrap();
    assert_eq!(merged.len(), 1);
    assert_eq!(rule(&merged, "d", &[("b", "x")]).map(|x| x.0), Some(2));
    let clash = Rules::load([("config.a.yaml", a), ("config.c.yaml", a)], true).unwrap_err();
    assert_eq!(
        clash.to_string(),
        "config.c.yaml: duplicate descriptor composite key 'd.a'"
    );
}

#[test]
fn yaml_1_1_words_and_numbers_as_go_reads_them() {
    let r = rules(
        "domain: d
descriptors:
  - key: code
    value: 123
    shadow_mode: yes
    rate_limit: {unit: second, requests_per_unit: 7}
",
    );
    let found = r.domain("d").unwrap().find(&[("code", "123")]).unwrap();
    assert!(found.node.shadow_mode);
    assert_eq!(found.limit.requests_per_unit, 7);
    assert_eq!(
        r.dump(),
        ["d.code_123: unit=SECOND requests_per_unit=7, shadow_mode: true, quota_mode: false"]
    );
}

/// The one known difference (docs/gateway.md): a number in another base is read as its decimal,
/// where envoyproxy/ratelimit keeps the text (`d.k_0x1F`).
#[test]
fn a_hexadecimal_value_is_read_as_its_decimal() {
    let r = rules("domain: d\ndescriptors:\n  - key: k\n    value: 0x1F\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
    assert_eq!(
        r.dump(),
        ["d.k_31: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false"]
    );
}
