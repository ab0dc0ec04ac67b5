//! Splitting a batch of spans or log records into requests the collector
//! takes. Pure.
//!
//! Owns: the byte limit requests are kept under ([`RequestLimit`]), the
//! parts a batch is sent in ([`Parts`]), and what a refusal as too large
//! ([`super::retry::Verdict::TooLarge`]) does to them. Must not touch: I/O,
//! the store, encoding (callers hand in each item's encoded size).
//!
//! # Why
//!
//! A collector refuses a request over its limit (the Collector's gRPC
//! receiver: `max_recv_msg_size_mib`, 4 MiB by default; its HTTP receiver:
//! `max_request_body_size`; a proxy's 413), and refuses it again however
//! often it is sent. Spans with captured content are large, so a batch of
//! them can be over the limit when each span alone is well under it.
//!
//! # How
//!
//! - A batch is cut, in order, into parts of at most the limit's bytes
//!   (`HERMES_METER_EXPORT_MAX_REQUEST_BYTES`, 3 MiB by default),
//!   measured as the request's encoded protobuf size (before compression:
//!   grpc-go applies its limit after decompressing, and an upper bound is
//!   what is wanted). An item larger than the limit alone is a part of its
//!   own: the collector may take more than the limit says.
//! - When the collector still refuses a part as too large, the limit
//!   learned is halved from the smaller of itself and that part's size, the
//!   part is sent again as its two halves, and what was left of the batch
//!   is cut anew under the new limit. Each accepted request doubles the
//!   learned limit back toward the configured one.
//! - A part of one item that is refused is that item's end: the caller
//!   counts it rejected (never dropped unseen). Whether a refusal is
//!   believed at all is the caller's (`SizeLimit` in `mod.rs`: not for a
//!   request no larger than one the collector took, and not for an item
//!   alone until refused again over a minute).
//!
//! # Nothing is sent twice
//!
//! Every part is a range of the batch, the parts in the queue never
//! overlap and always cover exactly what is not yet done, and a refused
//! part is replaced by ranges covering exactly its items. The caller marks
//! each part's rows done in the store as soon as that part is accepted or
//! rejected, before sending the next: an item is in one accepted request
//! at most (`every_item_is_accepted_or_rejected_exactly_once`).

use std::collections::VecDeque;
use std::ops::Range;

/// What the request around the items may grow by as items are added: the
/// length prefixes of the resource and scope messages, each a varint of
/// at most 5 bytes for a length under 4 GiB, beyond the 1 byte each has
/// when empty.
const ENVELOPE_GROWTH: usize = 2 * 4;

/// The bytes `encoded_len` bytes of an item take in its request: its
/// field's tag (one byte: the field numbers of spans and log records are
/// small) and its length prefix.
pub(crate) fn item_len(encoded_len: usize) -> usize {
    1 + prost::length_delimiter_len(encoded_len) + encoded_len
}

/// The byte limit a signal's requests are kept under: the configured one,
/// halved each time the collector refuses a request as too large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestLimit {
    bytes: usize,
}

impl RequestLimit {
    /// The configured limit (at least 1 byte).
    pub(crate) fn new(bytes: usize) -> Self {
        RequestLimit { bytes: bytes.max(1) }
    }

    /// The limit now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The collector refused a request of `refused` bytes as too large:
    /// the limit becomes half the smaller of itself and that size.
    fn halve(&mut self, refused: usize) {
        self.bytes = (self.bytes.min(refused) / 2).max(1);
    }

    /// The collector took a request: the limit doubles back toward
    /// `configured` (a refusal halves it again), so a burst of refusals
    /// does not leave requests small for the life of the process.
    pub(crate) fn grow(&mut self, configured: usize) {
        self.bytes = self
            .bytes
            .saturating_mul(2)
            .min(configured.max(1))
            .max(self.bytes.min(configured.max(1)));
    }
}

/// The parts a batch is sent in, as ranges of its items, in order.
#[derive(Debug, Clone)]
pub(crate) struct Parts {
    /// Each item's [`item_len`].
    sizes: Vec<usize>,
    /// The request's size without items, plus [`ENVELOPE_GROWTH`].
    overhead: usize,
    /// The parts not yet sent; together exactly the items not yet done.
    queue: VecDeque<Range<usize>>,
}

/// What to do with a part the collector refused as too large.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its halves go next; the limit is now this many bytes.
    Split { limit: usize },
    /// It is one item, too large alone: count it rejected.
    Alone,
}

impl Parts {
    /// The items of `sizes` (each an [`item_len`]) in a request whose size
    /// without items is `empty_request` bytes, cut under `limit`.
    pub(crate) fn new(sizes: Vec<usize>, empty_request: usize, limit: &RequestLimit) -> Self {
        let mut parts = Parts {
            overhead: empty_request + ENVELOPE_GROWTH,
            queue: VecDeque::new(),
            sizes,
        };
        parts.queue = parts.cut(0..parts.sizes.len(), limit.bytes());
        parts
    }

    /// The next part to send.
    pub(crate) fn next(&mut self) -> Option<Range<usize>> {
        self.queue.pop_front()
    }

    /// `part` (just taken by [`Parts::next`]) goes again, first.
    pub(crate) fn again(&mut self, part: Range<usize>) {
        self.queue.push_front(part);
    }

    /// An upper bound of the encoded size of `part`'s request.
    pub(crate) fn bytes(&self, part: &Range<usize>) -> usize {
        self.overhead + self.sizes[part.clone()].iter().sum::<usize>()
    }

    /// The collector refused `part` (just taken by [`Parts::next`]) as too
    /// large: unless it is one item, `limit` is halved, its halves are sent
    /// next, and the parts after it are cut anew under the new limit.
    pub(crate) fn refused(&mut self, part: Range<usize>, limit: &mut RequestLimit) -> Refused {
        if part.len() <= 1 {
            return Refused::Alone;
        }
        limit.halve(self.bytes(&part));
        let rest = match (self.queue.front(), self.queue.back()) {
            (Some(first), Some(last)) => first.start..last.end,
            _ => part.end..part.end,
        };
        let mut queue = self.cut(rest, limit.bytes());
        let (first, second) = self.halves(part);
        queue.push_front(second);
        queue.push_front(first);
        self.queue = queue;
        Refused::Split { limit: limit.bytes() }
    }

    /// `part` (two items or more) cut in two where its items' bytes are
    /// closest to half, each half holding at least one item.
    fn halves(&self, part: Range<usize>) -> (Range<usize>, Range<usize>) {
        let total: usize = self.sizes[part.clone()].iter().sum();
        let mut at = part.start + 1;
        let mut before = self.sizes[part.start];
        while at < part.end - 1 && before + self.sizes[at] <= total / 2 {
            before += self.sizes[at];
            at += 1;
        }
        (part.start..at, at..part.end)
    }

    /// `items` cut, in order, into parts of at most `limit` bytes (an item
    /// larger alone is a part of its own).
    fn cut(&self, items: Range<usize>, limit: usize) -> VecDeque<Range<usize>> {
        let mut out = VecDeque::new();
        let mut start = items.start;
        let mut bytes = self.overhead;
        for i in items.clone() {
            if i > start && bytes + self.sizes[i] > limit {
                out.push_back(start..i);
                start = i;
                bytes = self.overhead;
            }
            bytes += self.sizes[i];
        }
        if start < items.end {
            out.push_back(start..items.end);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parts left, as `(first, end)` pairs.
    fn all(parts: &mut Parts) -> Vec<(usize, usize)> {
        std::iter::from_fn(|| parts.next()).map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn a_batch_is_cut_in_order_under_the_limit_and_a_large_item_goes_alone() {
        // Overhead 10 + 8 of growth: 18 bytes before any item.
        for (sizes, limit, want) in [
            (vec![10, 10, 10], 1000, vec![(0, 3)]),
            (vec![10, 10, 10], 38, vec![(0, 2), (2, 3)]),
            (vec![10, 10, 10], 37, vec![(0, 1), (1, 2), (2, 3)]),
            (vec![10, 500, 10], 100, vec![(0, 1), (1, 2), (2, 3)]),
            (vec![500], 100, vec![(0, 1)]),
            (vec![], 100, Vec::new()),
        ] {
            let mut parts = Parts::new(sizes.clone(), 10, &RequestLimit::new(limit));
            assert_eq!(all(&mut parts), want, "{sizes:?} under {limit}");
        }
    }

    #[test]
    fn a_refused_part_is_sent_again_as_its_halves_and_the_rest_is_cut_anew() {
        let mut limit = RequestLimit::new(1000);
        let mut parts = Parts::new(vec![100; 8], 0, &limit);
        let first = parts.next().expect("a part");
        assert_eq!(first, 0..8);
        assert_eq!(parts.bytes(&first), 808);
        assert_eq!(parts.refused(first, &mut limit), Refused::Split { limit: 404 });
        assert_eq!(all(&mut parts), [(0, 4), (4, 8)]);

        // The halves go first, then what was left, cut under the new limit.
        let mut limit = RequestLimit::new(700);
        let mut parts = Parts::new(vec![100; 12], 0, &limit);
        let first = parts.next().expect("a part");
        assert_eq!(first, 0..6);
        assert_eq!(parts.refused(first, &mut limit), Refused::Split { limit: 304 });
        assert_eq!(all(&mut parts), [(0, 3), (3, 6), (6, 8), (8, 10), (10, 12)]);
    }

    #[test]
    fn halves_are_cut_by_bytes_and_never_empty() {
        let parts = Parts::new(vec![1000, 1, 1, 1], 0, &RequestLimit::new(1 << 20));
        assert_eq!(parts.halves(0..4), (0..1, 1..4));
        assert_eq!(parts.halves(1..3), (1..2, 2..3));
        let parts = Parts::new(vec![1, 1, 1, 1000], 0, &RequestLimit::new(1 << 20));
        assert_eq!(parts.halves(0..4), (0..3, 3..4));
    }

    #[test]
    fn one_item_refused_is_alone_and_leaves_the_limit_as_it_was() {
        let mut limit = RequestLimit::new(100);
        let mut parts = Parts::new(vec![10, 500, 10], 0, &limit);
        assert_eq!(parts.next(), Some(0..1));
        let big = parts.next().expect("the large item");
        assert_eq!(parts.refused(big, &mut limit), Refused::Alone);
        assert_eq!(limit.bytes(), 100);
        assert_eq!(all(&mut parts), [(2, 3)]);
    }

    #[test]
    fn the_limit_never_reaches_zero() {
        let mut limit = RequestLimit::new(0);
        assert_eq!(limit.bytes(), 1);
        limit.halve(1);
        assert_eq!(limit.bytes(), 1);
    }

    /// A collector that takes requests up to `takes` bytes, against batches
    /// of every shape: each item ends accepted once or rejected once (when
    /// it is larger alone than the collector takes), never both, never
    /// twice, and every request taken is under what the collector takes.
    #[test]
    fn every_item_is_accepted_or_rejected_exactly_once() {
        let mut seed = 7u64;
        let mut random = move |n: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize % n
        };
        for round in 0..500 {
            let n = random(40);
            let sizes: Vec<usize> = (0..n)
                .map(|_| {
                    let most = if random(10) == 0 { 5000 } else { 300 };
                    1 + random(most)
                })
                .collect();
            let takes = 50 + random(3000);
            let mut limit = RequestLimit::new(1 + random(10_000));
            let mut parts = Parts::new(sizes.clone(), 20, &limit);
            let mut accepted = vec![0; n];
            let mut rejected = vec![0; n];
            let mut sends = 0;
            while let Some(part) = parts.next() {
                sends += 1;
                assert!(sends < 10 * n + 10, "round {round}: no end");
                if parts.bytes(&part) <= takes {
                    part.clone().for_each(|i| accepted[i] += 1);
                } else if parts.refused(part.clone(), &mut limit) == Refused::Alone {
                    rejected[part.start] += 1;
                }
            }
            for i in 0..n {
                assert_eq!(accepted[i] + rejected[i], 1, "round {round}: item {i}");
                assert_eq!(rejected[i] == 1, 20 + 8 + sizes[i] > takes, "round {round}: item {i}");
            }
        }
    }
}
