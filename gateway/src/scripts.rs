//! The script backend's side of a call, where the server has no module (managed Redis and
//! Valkey refuse `MODULE LOAD`): the Lua script that stands for each command a plan makes, from
//! the client packages' one set (`clients/lua`: reply for reply the module's), and its
//! text assembled as the packages assemble it (the parts its `-- needs:` line names, in that
//! order, then the script itself).

/// The script (its file name, without `.lua`) that stands for a module command the plans make.
pub fn script_for(command: &str) -> Option<&'static str> {
    Some(match command {
        "RL.FIXEDWINDOW" => "fixedwindow",
        "RL.SLIDINGWINDOW" => "slidingwindow",
        "RL.SLIDINGLOG" => "slidinglog",
        "RL.GCRA" => "gcra",
        "RL.TOKENBUCKET" => "tokenbucket",
        "RL.LEAKYBUCKET" => "leakybucket",
        "RL.REFUND" => "refund",
        _ => return None,
    })
}

/// The commands a plan makes, each with its script.
pub const COMMANDS: [&str; 7] = [
    "RL.FIXEDWINDOW",
    "RL.SLIDINGWINDOW",
    "RL.SLIDINGLOG",
    "RL.GCRA",
    "RL.TOKENBUCKET",
    "RL.LEAKYBUCKET",
    "RL.REFUND",
];

/// A script's whole text: the parts (`part(name)`: `lib/<name>.lua`) its `-- needs:` line
/// names, in that order, then `entry`.
pub fn assemble<'a>(entry: &str, part: impl Fn(&str) -> Option<&'a str>) -> Result<String, String> {
    let needs = entry
        .lines()
        .find_map(|l| l.strip_prefix("-- needs: "))
        .ok_or("the script names no parts (its '-- needs:' line)")?;
    let mut text = String::new();
    for name in needs.split_whitespace() {
        text.push_str(part(name).ok_or_else(|| format!("no part lib/{name}.lua"))?);
    }
    text.push_str(entry);
    Ok(text)
}

/// A module call as the script's: `EVALSHA <sha> 1 <key> <the words after the key>` (`sha`
/// the script's SHA-1), or none for a command no script stands for.
pub fn evalsha(call: &[String], sha: &str) -> Option<Vec<String>> {
    script_for(call.first()?)?;
    let mut out = vec!["EVALSHA".to_string(), sha.to_string(), "1".to_string()];
    out.extend(call[1..].iter().cloned());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_assembled_from_its_parts() {
        let entry = "-- RL.X\n-- needs: a b\nreturn x()\n";
        let part = |n: &str| match n {
            "a" => Some("A\n"),
            "b" => Some("B\n"),
            _ => None,
        };
        assert_eq!(assemble(entry, part).unwrap(), format!("A\nB\n{entry}"));
        assert!(assemble("-- needs: c\n", part)
            .unwrap_err()
            .contains("lib/c.lua"));
        assert!(assemble("return 1\n", part).is_err());
    }

    #[test]
    fn every_command_a_plan_makes_has_its_script() {
        for c in COMMANDS {
            assert!(script_for(c).is_some(), "{c}");
        }
        let call: Vec<String> = ["RL.GCRA", "k", "3", "10", "60s", "COST", "1"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            evalsha(&call, "abc").unwrap(),
            ["EVALSHA", "abc", "1", "k", "3", "10", "60s", "COST", "1"]
        );
        assert_eq!(evalsha(&["RL.LIMIT".to_string()], "abc"), None);
    }
}
