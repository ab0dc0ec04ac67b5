//! `status`'s Hermes section, printed from [`crate::hermes_check`].

use std::collections::BTreeMap;

use crate::hermes_check::{version_text, HermesView};

use hermes_meter_model::display::ago;

/// Prints `view` with the hook calls Hermes skipped (`skips`).
pub(super) fn print(view: &HermesView, skips: &hermes_meter_store::health::HealthCounts) {
    let now = hermes_meter_store::unix_now();
    println!("hermes");
    match view.reports.first() {
        None => println!("  processes     none reported yet (a Hermes process reports at its first hook call)"),
        Some(r) => {
            println!(
                "  last process  pid {}, {}: {}, Python {}, plugin {}, register took {:.1} ms",
                r.pid,
                ago(r.at, now),
                version_text(r),
                r.python.as_deref().unwrap_or("?"),
                if r.isolation == "host" {
                    "in Hermes's plugin host (plugins.isolation: host)"
                } else {
                    "in the agent's process"
                },
                r.register_ms
            );
            let abandoned = view.reports.iter().filter(|r| r.abandoned()).count();
            println!(
                "  loads         {} process(es) reported, {abandoned} abandoned by Hermes",
                view.reports.len()
            );
        }
    }
    match &view.unrecorded {
        Ok(u) if u.missing.is_empty() => println!(
            "  sessions      all {} Hermes session(s) since {} are recorded",
            u.compared,
            ago(u.since, now)
        ),
        Ok(u) => {
            let mut by_source: BTreeMap<&str, usize> = BTreeMap::new();
            for s in &u.missing {
                *by_source.entry(s.source.as_str()).or_default() += 1;
            }
            let sources: Vec<String> = by_source
                .iter()
                .map(|(k, n)| format!("{n} {}", hermes_meter_model::display::escape(k)))
                .collect();
            println!(
                "  sessions      {} of {} Hermes session(s) since {} NOT recorded ({})",
                u.missing.len(),
                u.compared,
                ago(u.since, now),
                sources.join(", ")
            );
            for s in u.missing.iter().rev().take(5) {
                println!(
                    "    {} {} {}",
                    hermes_meter_model::display::escape(&s.id),
                    hermes_meter_model::display::escape(&s.source),
                    ago(s.started_at, now)
                );
            }
        }
        Err(why) => println!("  sessions      {why}"),
    }
    if skips.hermes_skipped_recorded + skips.hermes_skipped_lost > 0 {
        println!(
            "  skipped calls {} hook calls Hermes skipped ({} after a timeout of ours, the rest while \
             another call of the callback ran): {} recorded anyway, {} lost",
            skips.hermes_skipped_recorded + skips.hermes_skipped_lost,
            skips.hermes_skipped_after_timeout,
            skips.hermes_skipped_recorded,
            skips.hermes_skipped_lost
        );
    }
    if skips.hermes_timeouts > 0 {
        println!(
            "  timeouts      {} hook calls outlived Hermes's hook timeout (recorded; Hermes then skips \
             that hook for a while)",
            skips.hermes_timeouts
        );
    }
    if let Some(r) = view.reports.iter().find(|r| !r.abandoned()) {
        println!("  integration points (pid {}):", r.pid);
        for p in &r.points {
            println!("    {}", hermes_meter_model::display::escape(&p.line()));
        }
    }
}
