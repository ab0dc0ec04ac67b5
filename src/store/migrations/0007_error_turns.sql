-- Schema version 7: failed attempts by turn.
-- on_session_finalize decides each still-open turn's outcome from its
-- failed attempts; without this index that read every error row ever
-- recorded, once per open turn. Errors are rare, so the index costs little.
CREATE INDEX llm_call_errors_turn ON llm_call_errors (turn_id);
