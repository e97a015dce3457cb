-- The BYO relay kind (src/byo/): reasoning jobs and chat dispatches for the paired plugin, and
-- the transcript turns waiting for (or carried by) a live-analysis job.
CREATE TABLE byo_jobs (
    job_id TEXT PRIMARY KEY,
    -- live_analysis | session_summary | capability_probe | chat | connectivity_test
    purpose TEXT NOT NULL,
    -- The app session the answer goes to (`insights:<call>`, a chat, or NULL).
    app_session TEXT,
    -- The outbox task id that created the job (a retried delivery finds its job again).
    source_task_id TEXT UNIQUE,
    -- For chat: the user message id; for live analysis: the first turn's task id.
    anchor TEXT,
    correlation_id TEXT NOT NULL,
    -- queued | dispatched | completed | failed | timed_out
    state TEXT NOT NULL,
    deadline_ms INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    -- The full stream event (JSON, payload sealed); NULL while a live job is still batching.
    event TEXT,
    result TEXT,
    error_code TEXT,
    error_message TEXT,
    completed_ms INTEGER,
    -- 1 once the result went into the conversation.
    applied INTEGER NOT NULL DEFAULT 0,
    -- Plain chat replies: the assistant message id handed out by reply/start, and the deltas.
    reply_id TEXT,
    partial TEXT
);
CREATE INDEX byo_jobs_open ON byo_jobs (state, created_ms);
CREATE INDEX byo_jobs_session ON byo_jobs (app_session, purpose, state);

CREATE TABLE byo_turns (
    task_id TEXT PRIMARY KEY,
    call_id TEXT NOT NULL,
    speaker TEXT,
    text TEXT NOT NULL,
    occurred_at TEXT NOT NULL,
    seq INTEGER NOT NULL,
    -- The live-analysis job carrying this turn (NULL: waiting for the next job).
    job_id TEXT
);
CREATE INDEX byo_turns_call ON byo_turns (call_id, seq);
