//! Prices the host (Hermes) knows for models our tables do not: whether to
//! ask, and the answer handed to the writer.
//!
//! Owns: the bounded memory of the models asked about and when. Must not
//! touch: Python (the binding asks and calls [`Bridge::set_host_price`]),
//! the store.

use std::time::{Duration, Instant};

use super::{Bridge, Job, Running, State};
use crate::lock;
use hermes_meter_model::pricing::ModelPrice;

/// How long before the host is asked again for a price it did not have.
pub(crate) const HOST_PRICE_RETRY: Duration = Duration::from_secs(60);

/// Most models [`Bridge::needs_host_price`] remembers; past this it starts
/// over (a model is then looked up or asked about again), so a gateway
/// that meets ever new model names keeps a bounded map.
pub(super) const MAX_HOST_ASKED: usize = 1024;

pub(super) enum HostAsk {
    /// The user's file or the built-in table prices it: never asked.
    Known,
    Priced,
    Asked(Instant),
}

impl Running {
    /// Whether the host was asked for `model`'s price (so the writer may
    /// price it with an answer the hook thread has not seen).
    pub(super) fn host_was_asked(&self, model: &str) -> bool {
        matches!(
            lock(&self.host_asked).get(model),
            Some(HostAsk::Priced | HostAsk::Asked(_))
        )
    }
}

impl Bridge {
    /// Whether the host should be asked for `model`'s price: neither the
    /// user's file nor the built-in table knows it, the host has not priced
    /// it yet, and it was not asked in the last [`HOST_PRICE_RETRY`] (Hermes
    /// may learn prices later, but asking on every call would cost every
    /// call).
    pub fn needs_host_price(&self, model: &str) -> bool {
        let State::Running(run) = &self.state else {
            return false;
        };
        if model.is_empty() {
            return false;
        }
        let mut asked = lock(&run.host_asked);
        if asked.len() >= MAX_HOST_ASKED && !asked.contains_key(model) {
            asked.clear();
        }
        let now = Instant::now();
        match asked.get(model) {
            // The tables' answer is remembered: looking a model up is a
            // scan of every entry, and this runs on every LLM call.
            Some(HostAsk::Known | HostAsk::Priced) => false,
            None if run.prices.knows(model, None) => {
                asked.insert(model.to_string(), HostAsk::Known);
                false
            }
            Some(HostAsk::Asked(at)) if now.duration_since(*at) < HOST_PRICE_RETRY => false,
            _ => {
                asked.insert(model.to_string(), HostAsk::Asked(now));
                true
            }
        }
    }

    /// Records the price Hermes knows for `model`; events submitted after
    /// this call are costed with it (provenance `host`) unless the user's
    /// file or the built-in table knows the model.
    pub fn set_host_price(&self, model: &str, price: ModelPrice) {
        if let State::Running(run) = &self.state {
            lock(&run.host_asked).insert(model.to_string(), HostAsk::Priced);
            self.enqueue(run, Job::HostPrice(model.to_string(), price), false);
        }
    }
}
