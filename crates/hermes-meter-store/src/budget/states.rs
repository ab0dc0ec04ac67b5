//! Budget states: every budget of a session (or every budget at all) with
//! its spend in the current window and its verdict, assembled from the
//! store's spend reads. Reads the store; no SQL of its own.
//!
//! Owns: which windows and scope ids are read, the fleet's share when
//! budgets are the fleet's, and `assess` over each spend. Must not
//! touch: SQL (the spend reads are `budget/spend.rs`'s, the fleet
//! figures `fleet.rs`'s), Python. These are `Store` methods so that
//! every caller reads states the same way, but only through the store's
//! public reads.

use crate::error::Result;
use crate::Reader;
use hermes_meter_model::budget::{
    assess, assess_caps, timestamp, window_bounds, Budget, BudgetConfig, BudgetState, BudgetUnit, CapScope, CapState,
    Limits, Scope, ScopeKeys, Window,
};

impl Reader {
    /// The state of every budget of a session with `keys`, now.
    pub fn budget_states_for(
        &self,
        cfg: &BudgetConfig,
        keys: &ScopeKeys,
        now: f64,
        exclude: Option<&str>,
    ) -> Result<Vec<BudgetState>> {
        let mut bounds: [Option<(i64, i64, String)>; 3] = [None, None, None];
        self.states_of(cfg, cfg.budgets_for(keys), &mut bounds, now, exclude, None)
    }

    /// [`Reader::budget_states_for`] reading the per-period totals of the
    /// registered zone `zone` (see [`Writer::ensure_budget_zone`](crate::Writer::ensure_budget_zone)), which
    /// must be `cfg`'s zone.
    pub fn budget_states_in_zone(
        &self,
        cfg: &BudgetConfig,
        keys: &ScopeKeys,
        now: f64,
        exclude: Option<&str>,
        zone: &str,
    ) -> Result<Vec<BudgetState>> {
        let mut bounds: [Option<(i64, i64, String)>; 3] = [None, None, None];
        self.states_of(cfg, cfg.budgets_for(keys), &mut bounds, now, exclude, Some(zone))
    }

    /// Reads the spends of `budgets` (one statement per scope id) and
    /// assesses them.
    fn states_of(
        &self,
        cfg: &BudgetConfig,
        budgets: Vec<Budget>,
        bounds: &mut [Option<(i64, i64, String)>; 3],
        now: f64,
        exclude: Option<&str>,
        zone: Option<&str>,
    ) -> Result<Vec<BudgetState>> {
        let mut out = Vec::with_capacity(budgets.len());
        // With a fleet, once this store synced: the live hosts then (a store
        // that never synced knows no fleet figures and counts its own).
        let fleet_hosts = match cfg.fleet && !budgets.is_empty() {
            true => self.fleet_status()?.filter(|s| s.synced_at.is_some()).map(|s| s.hosts),
            false => None,
        };
        let mut i = 0;
        while i < budgets.len() {
            // budgets_for lists each scope id's windows (in both units)
            // together.
            let j = i + budgets[i..]
                .iter()
                .take_while(|b| b.scope == budgets[i].scope && b.id == budgets[i].id)
                .count();
            // Each window once, however many units it has a limit in.
            let mut read: Vec<Window> = budgets[i..j].iter().map(|b| b.window).collect();
            read.sort();
            read.dedup();
            let windows: Vec<(i64, i64, String)> = read.iter().map(|w| window(bounds, cfg, *w, now)).collect();
            let uses = match zone {
                Some(zone) => {
                    let periods: Vec<(Window, i64)> = read.iter().zip(&windows).map(|(w, b)| (*w, b.0)).collect();
                    self.period_spends(budgets[i].scope, &budgets[i].id, zone, &periods, now, exclude)?
                }
                None => {
                    let starts: Vec<i64> = windows.iter().map(|w| w.0).collect();
                    self.bucket_window_spends(budgets[i].scope, &budgets[i].id, &starts, now, exclude)?
                }
            };
            let of = |w: Window| read.iter().position(|r| *r == w).unwrap_or(0);
            for b in &budgets[i..j] {
                let k = of(b.window);
                let (_, end, period) = windows[k].clone();
                let spend = uses[k].spend(b.unit, cfg.tokens_counted);
                let (spend, fleet) = match fleet_hosts {
                    Some(hosts) => {
                        let (spend, share) = self.fleet_share(cfg, b, &period, spend, hosts)?;
                        (spend, Some(share))
                    }
                    None => (spend, None),
                };
                let (level, softened) = assess(cfg, b, spend);
                out.push(BudgetState {
                    budget: b.clone(),
                    spend,
                    level,
                    softened,
                    period,
                    window_end: end,
                    fleet,
                });
            }
            i = j;
        }
        Ok(out)
    }

    /// The state of every budget now: global, every override, and for a
    /// scope with a default, every id that spent in the window. For
    /// `budget list` and the metrics' budget gauges (not a hook path: it
    /// lists ids from the day buckets of the longest window).
    pub fn budget_states(&self, cfg: &BudgetConfig, now: f64) -> Result<Vec<BudgetState>> {
        let mut out = Vec::new();
        let mut bounds: [Option<(i64, i64, String)>; 3] = [None, None, None];
        for (scope, limits) in &cfg.scopes {
            let mut ids: std::collections::BTreeSet<String> = limits.overrides.keys().cloned().collect();
            if *scope == Scope::Global {
                ids.insert(String::new());
            } else if limits.default != Limits::default() {
                let since = Window::ALL
                    .iter()
                    .filter(|w| BudgetUnit::ALL.iter().any(|u| limits.default.get(**w, *u).is_some()))
                    .map(|w| window(&mut bounds, cfg, *w, now).0)
                    .min()
                    .unwrap_or(0);
                ids.extend(self.budget_ids_spent_since(*scope, since)?);
                if cfg.fleet {
                    // Ids only other hosts spent under.
                    ids.extend(self.fleet_view_ids(scope.as_str())?);
                }
            }
            let mut budgets = Vec::new();
            for id in ids {
                let l = cfg.limits(*scope, &id);
                for unit in BudgetUnit::ALL {
                    for w in Window::ALL {
                        if let Some(limit) = l.get(w, unit) {
                            budgets.push(Budget {
                                scope: *scope,
                                id: id.clone(),
                                window: w,
                                unit,
                                limit,
                            });
                        }
                    }
                }
            }
            out.extend(self.states_of(cfg, budgets, &mut bounds, now, None, None)?);
        }
        Ok(out)
    }
}

impl Reader {
    /// The caps of the `limit` newest running root sessions and of their
    /// open runs, now: for `budget list` and the viewer (not a hook path).
    pub fn open_cap_states(&self, cfg: &BudgetConfig, now: f64, limit: usize) -> Result<Vec<CapState>> {
        let mut out = Vec::new();
        if cfg.caps.is_empty() {
            return Ok(out);
        }
        let with_run = cfg.caps.contains_key(&CapScope::Run);
        for session in self.running_root_sessions(limit)? {
            let Some(used) = self.cap_use(&session, now, None, None, with_run)? else {
                continue;
            };
            out.extend(assess_caps(cfg, CapScope::Session, &used.root, &used.session));
            if let Some((turn, run)) = &used.run {
                out.extend(assess_caps(cfg, CapScope::Run, turn, run));
            }
        }
        Ok(out)
    }
}

/// The bounds and period name of `w` at `now`, computed once per call.
fn window(cache: &mut [Option<(i64, i64, String)>; 3], cfg: &BudgetConfig, w: Window, now: f64) -> (i64, i64, String) {
    let slot = &mut cache[w as usize];
    if slot.is_none() {
        let t = timestamp(now);
        let (s, e) = window_bounds(w, t, &cfg.tz);
        let period = s.to_zoned(cfg.tz.clone()).date().to_string();
        *slot = Some((s.as_second(), e.as_second(), period));
    }
    slot.clone().unwrap_or_default()
}
