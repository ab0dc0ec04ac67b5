//! The deterministic trace and span ids: hashes of Hermes ids, so the same
//! ledger row always becomes the same span (see the table in `span/mod.rs`).
//! Pure.
//!
//! Owns: the hash and the parts each kind of span id is made of. Must not
//! touch: span contents.

/// The span id of a session's root span.
pub fn session_span_id(session_id: &str) -> [u8; 8] {
    span_id(&["session", session_id])
}

/// The span id of session span `n`: the root span for 0, continuation `n`
/// after it (see [`super::session_span`]).
pub fn session_part_span_id(session_id: &str, n: i64) -> [u8; 8] {
    if n <= 0 {
        session_span_id(session_id)
    } else {
        span_id(&["session", session_id, &n.to_string()])
    }
}

/// The span id of a turn span.
pub fn turn_span_id(turn_id: &str) -> [u8; 8] {
    span_id(&["turn", turn_id])
}

/// The span id of attempt `attempt` (0-based) of an API request.
pub fn attempt_span_id(api_request_id: &str, attempt: i64) -> [u8; 8] {
    span_id(&["chat", api_request_id, &attempt.to_string()])
}

/// The span id of a tool call (tool call ids repeat across sessions).
pub fn tool_span_id(session_id: &str, tool_call_id: &str) -> [u8; 8] {
    span_id(&["tool", session_id, tool_call_id])
}

/// The span id of an approval (its session and key).
pub fn approval_span_id(session_id: &str, key: &str) -> [u8; 8] {
    span_id(&["approval", session_id, key])
}

/// A 128-bit trace id from parts (never all zero).
pub fn trace_id(parts: &[&str]) -> [u8; 16] {
    let a = hash64(0x6a09_e667_f3bc_c908, parts);
    let b = hash64(0xbb67_ae85_84ca_a73b, parts);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&a.to_be_bytes());
    out[8..].copy_from_slice(&b.to_be_bytes());
    if out == [0; 16] {
        out[15] = 1;
    }
    out
}

/// A 64-bit span id from parts (never zero).
pub fn span_id(parts: &[&str]) -> [u8; 8] {
    let h = hash64(0x3c6e_f372_fe94_f82b, parts);
    if h == 0 {
        1u64.to_be_bytes()
    } else {
        h.to_be_bytes()
    }
}

/// FNV-1a over the parts (each followed by a separator byte no id
/// contains), seeded, then a splitmix64 finalizer to spread the bits.
/// Stable across builds and platforms, unlike std's hasher.
fn hash64(seed: u64, parts: &[&str]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = 0xcbf2_9ce4_8422_2325 ^ seed;
    for part in parts {
        for &b in part.as_bytes().iter().chain(std::iter::once(&0xffu8)) {
            h ^= b as u64;
            h = h.wrapping_mul(PRIME);
        }
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}
