-- Messages of the usage stream that the reconciler will not write to
-- usage_reports: bodies that are not valid reports, figures out of range, a
-- region or process that differs from the subject, and rows Postgres refused
-- (a data or constraint error, found by splitting the batch). Each is
-- terminated on the stream after it is recorded here, so that it never
-- blocks ingestion. A redelivered message is recorded once.
CREATE TABLE usage_dead_letters (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream       text        NOT NULL,
    stream_seq   bigint,
    published_at timestamptz,
    subject      text        NOT NULL,
    reason       text        NOT NULL,
    detail       text        NOT NULL,
    raw          bytea       NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (stream, stream_seq, published_at)
);

COMMENT ON TABLE usage_dead_letters IS 'Usage-stream messages the reconciler terminated instead of writing; written only by the reconciler.';
COMMENT ON COLUMN usage_dead_letters.stream_seq IS 'JetStream stream sequence of the message (NULL when unknown).';
COMMENT ON COLUMN usage_dead_letters.published_at IS 'When the stream stored the message (NULL when unknown).';
COMMENT ON COLUMN usage_dead_letters.reason IS 'invalid, out_of_range, subject or refused (the label of quota_reconciler_dead_letters_total).';
COMMENT ON COLUMN usage_dead_letters.detail IS 'The error, for people.';
COMMENT ON COLUMN usage_dead_letters.raw IS 'The message body exactly as received.';

CREATE INDEX usage_dead_letters_recorded_at ON usage_dead_letters (recorded_at);

---- create above / drop below ----

DROP TABLE usage_dead_letters;
