//! The rules files watched: read again every second, and when any file's text changed (one added,
//! removed, edited, or the runtime root's symlink swapped to another directory) loaded whole; a
//! bad set is refused with its error and the rules in force stay, as envoyproxy/ratelimit does
//! (counted in `ratelimit_service_config_load_success` and `_error`).

use std::sync::Arc;
use std::time::Duration;

use crate::log;
use crate::service::Service;

/// The first load, at start: the files' texts and the rules (none when a file is bad or the
/// directory unreadable: every request then fails with "no rate limit configuration loaded"
/// until a good load).
pub fn first(
    service_settings: &gateway::settings::Settings,
) -> (Option<Vec<(String, String)>>, Option<gateway::rules::Rules>) {
    let layout = &service_settings.layout;
    let files = match layout.read() {
        Ok(files) => files,
        Err(e) => {
            log::error(&format!(
                "Error loading new configuration: error reading the rules files: {e}"
            ));
            return (None, None);
        }
    };
    let rules = load(&files, service_settings.merge_domains);
    (Some(files), rules)
}

fn load(files: &[(String, String)], merge: bool) -> Option<gateway::rules::Rules> {
    match gateway::rules::Rules::load(files.iter().map(|(n, t)| (n.as_str(), t.as_str())), merge) {
        Ok(rules) => {
            log::info("Successfully loaded new configuration");
            Some(rules)
        }
        Err(e) => {
            log::error(&format!("Error loading new configuration: {e}"));
            None
        }
    }
}

/// Reads the files every `every` and loads them when they changed since `seen`.
pub async fn watch(
    service: Arc<Service>,
    mut seen: Option<Vec<(String, String)>>,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let layout = service.settings.layout.clone();
        let read = tokio::task::spawn_blocking(move || layout.read()).await;
        let files = match read {
            Ok(Ok(files)) => files,
            Ok(Err(e)) => {
                if seen.is_some() {
                    log::error(&format!(
                        "Error loading new configuration: error reading the rules files: {e}"
                    ));
                    service.metrics.loaded(false);
                    seen = None;
                }
                continue;
            }
            Err(_) => continue,
        };
        if seen.as_ref() == Some(&files) {
            continue;
        }
        match load(&files, service.settings.merge_domains) {
            Some(rules) => {
                service.set_rules(rules);
                service.metrics.loaded(true);
            }
            None => service.metrics.loaded(false),
        }
        seen = Some(files);
    }
}
