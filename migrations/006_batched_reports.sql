-- Batched usage reports (ledger.EncodingBatch): one message carries many
-- reports, so one message may give several dead letters, one per refused
-- report, told apart by its place in the batch (report_index; -1 for a
-- letter that is a whole message). And shadow plans' would-be rejections
-- (region.Plan.Shadow) get a column of their own.
ALTER TABLE usage_dead_letters ADD COLUMN report_index integer NOT NULL DEFAULT -1;
ALTER TABLE usage_dead_letters DROP CONSTRAINT usage_dead_letters_stream_stream_seq_published_at_key;
ALTER TABLE usage_dead_letters ADD CONSTRAINT usage_dead_letters_message_report
    UNIQUE (stream, stream_seq, published_at, report_index);

COMMENT ON COLUMN usage_dead_letters.report_index IS 'Place of the refused report in a batch message (raw is then that report alone, as JSON); -1 when the letter is the whole message.';
COMMENT ON COLUMN usage_dead_letters.raw IS 'The message body exactly as received, or one report of a batch as JSON (report_index >= 0).';

ALTER TABLE usage_reports ADD COLUMN would_reject bigint NOT NULL DEFAULT 0 CHECK (would_reject >= 0);

COMMENT ON COLUMN usage_reports.would_reject IS 'Cost of checks a shadow plan allowed but would have rejected (not part of spent or rejected).';

---- create above / drop below ----

ALTER TABLE usage_reports DROP COLUMN would_reject;
ALTER TABLE usage_dead_letters DROP CONSTRAINT usage_dead_letters_message_report;
DELETE FROM usage_dead_letters WHERE report_index >= 0;
ALTER TABLE usage_dead_letters DROP COLUMN report_index;
ALTER TABLE usage_dead_letters ADD UNIQUE (stream, stream_seq, published_at);
