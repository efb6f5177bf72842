-- Placeholder for migration 019, which another branch of issue 36 adds:
-- tern needs every number below 020. Delete this file when that branch's
-- 019 is merged (tern refuses two files numbered 019).
SELECT 1;

---- create above / drop below ----

SELECT 1;
