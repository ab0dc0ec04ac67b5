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
    self, assess, assess_caps, rolling_frees_at, timestamp, window_bounds, Budget, BudgetConfig, BudgetState, CapScope,
    CapState, Frees, Level, Limits, Rolling, Scope, ScopeKeys, Spend, Window, WindowUse, ROLLING_STEP, WINDOW_COUNT,
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
        self.states_of(cfg, cfg.budgets_for(keys), &mut no_bounds(), now, exclude, None)
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
        self.states_of(cfg, cfg.budgets_for(keys), &mut no_bounds(), now, exclude, Some(zone))
    }

    /// Reads the spends of `budgets` (one statement per scope id) and
    /// assesses them.
    fn states_of(
        &self,
        cfg: &BudgetConfig,
        budgets: Vec<Budget>,
        bounds: &mut Bounds,
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
            let (scope, id) = (budgets[i].scope, budgets[i].id.as_str());
            let uses = self.window_uses(scope, id, &read, &windows, now, exclude, zone)?;
            let of = |w: Window| read.iter().position(|r| *r == w).unwrap_or(0);
            for b in &budgets[i..j] {
                let k = of(b.window);
                let (start, mut end, period) = windows[k].clone();
                let spend = uses[k].spend(b.unit, cfg.tokens_counted);
                // A rolling window's fleet figures are the last sync's,
                // whatever block it is in.
                let fleet_period = match b.window.rolling() {
                    Some(_) => budget::ROLLING_FLEET_PERIOD,
                    None => period.as_str(),
                };
                let (spend, fleet) = match fleet_hosts {
                    Some(hosts) => {
                        let (spend, share) = self.fleet_share(cfg, b, fleet_period, spend, hosts)?;
                        (spend, Some(share))
                    }
                    None => (spend, None),
                };
                let (level, softened) = assess(cfg, b, spend);
                let mut frees = None;
                if let Some(r) = b.window.rolling() {
                    (end, frees) = self.rolling_release(cfg, b, r, start, spend, level)?;
                }
                out.push(BudgetState {
                    budget: b.clone(),
                    spend,
                    level,
                    softened,
                    period,
                    window_end: end,
                    frees,
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
        let mut bounds = no_bounds();
        for (scope, limits) in &cfg.scopes {
            let mut ids: std::collections::BTreeSet<String> = limits.overrides.keys().cloned().collect();
            if *scope == Scope::Global {
                ids.insert(String::new());
            } else if limits.default != Limits::default() {
                let since = limits
                    .default
                    .iter()
                    .map(|(w, _, _)| window(&mut bounds, cfg, w, now).0)
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
                for (window, unit, limit) in cfg.limits(*scope, &id).iter() {
                    budgets.push(Budget {
                        scope: *scope,
                        id: id.clone(),
                        window,
                        unit,
                        limit,
                    });
                }
            }
            out.extend(self.states_of(cfg, budgets, &mut bounds, now, None, None)?);
        }
        Ok(out)
    }
}

impl Reader {
    /// One scope id's use in each window of `read` (bounds in `windows`):
    /// calendar windows from a registered zone's per-period totals when
    /// `zone` is set, else (and rolling windows always) from the buckets,
    /// three windows a statement.
    #[allow(clippy::too_many_arguments)]
    fn window_uses(
        &self,
        scope: Scope,
        id: &str,
        read: &[Window],
        windows: &[(i64, i64, String)],
        now: f64,
        exclude: Option<&str>,
        zone: Option<&str>,
    ) -> Result<Vec<WindowUse>> {
        let mut uses = vec![WindowUse::default(); read.len()];
        let (periodic, summed): (Vec<usize>, Vec<usize>) =
            (0..read.len()).partition(|k| zone.is_some() && read[*k].rolling().is_none());
        if let (Some(zone), false) = (zone, periodic.is_empty()) {
            let periods: Vec<(Window, i64)> = periodic.iter().map(|k| (read[*k], windows[*k].0)).collect();
            for (k, u) in periodic
                .iter()
                .zip(self.period_spends(scope, id, zone, &periods, now, exclude)?)
            {
                uses[*k] = u;
            }
        }
        for chunk in summed.chunks(3) {
            let starts: Vec<i64> = chunk.iter().map(|k| windows[*k].0).collect();
            for (k, u) in chunk
                .iter()
                .zip(self.bucket_window_spends(scope, id, &starts, now, exclude)?)
            {
                uses[*k] = u;
            }
        }
        Ok(uses)
    }

    /// A rolling budget's next release and the time it stands for (see
    /// `BudgetState::window_end`): in hard breach, when enough of what it
    /// spent has left the window to be under the hard line (if what calls
    /// in flight reserve alone keeps it over, when its last spend leaves);
    /// else when its oldest spend leaves. With a fleet, from this host's
    /// spend: other hosts' buckets are not kept here.
    fn rolling_release(
        &self,
        cfg: &BudgetConfig,
        b: &Budget,
        width: Rolling,
        start: i64,
        spend: Spend,
        level: Level,
    ) -> Result<(i64, Option<Frees>)> {
        let quiet = rolling_frees_at(width, start);
        let unit = (b.unit, cfg.tokens_counted);
        if level != Level::Hard {
            let first = self.rolling_rows(b.scope, &b.id, start, unit, 1)?;
            let frees = first.first().map(|(bucket, amount)| Frees {
                amount: *amount,
                at: rolling_frees_at(width, *bucket),
            });
            return Ok((frees.map_or(quiet, |f| f.at), frees));
        }
        // A window holds at most one bucket per step of its width.
        let most = usize::try_from(width.seconds() / ROLLING_STEP + 1).unwrap_or(usize::MAX);
        let rows = self.rolling_rows(b.scope, &b.id, start, unit, most)?;
        let frees = rows.first().map(|(bucket, amount)| Frees {
            amount: *amount,
            at: rolling_frees_at(width, *bucket),
        });
        let line = b.limit * cfg.hard_threshold;
        let mut left = spend.total();
        let mut back = rows
            .last()
            .map_or(quiet, |(bucket, _)| rolling_frees_at(width, *bucket));
        for (bucket, amount) in &rows {
            left -= amount;
            if left < line {
                back = rolling_frees_at(width, *bucket);
                break;
            }
        }
        Ok((back, frees))
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

/// Each window's bounds and period name at `now`, by [`Window::index`].
type Bounds = [Option<(i64, i64, String)>; WINDOW_COUNT];

fn no_bounds() -> Bounds {
    std::array::from_fn(|_| None)
}

/// The bounds and period name of `w` at `now`, computed once per call.
fn window(cache: &mut Bounds, cfg: &BudgetConfig, w: Window, now: f64) -> (i64, i64, String) {
    let slot = &mut cache[w.index()];
    if slot.is_none() {
        let t = timestamp(now);
        let (s, e) = window_bounds(w, t, &cfg.tz);
        let period = match w.rolling() {
            Some(_) => budget::period_name(w, t, &cfg.tz),
            None => s.to_zoned(cfg.tz.clone()).date().to_string(),
        };
        *slot = Some((s.as_second(), e.as_second(), period));
    }
    slot.clone().unwrap_or_default()
}
