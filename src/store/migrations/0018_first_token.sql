-- Schema version 18: when an LLM call's first token arrived (Unix seconds):
-- Hermes main's first text delta of the successful attempt, else its first
-- stream chunk (`first_delta_at`, `first_chunk_at` of post_api_request).
-- NULL for a call that was not streamed or came from a Hermes that does
-- not report it (0.19), so no time to first token is made up for it.
ALTER TABLE llm_calls ADD COLUMN first_token_at REAL;
