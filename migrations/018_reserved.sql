-- Placeholder for migration 018, which another branch of issue 36 adds:
-- tern needs every number below 020. Delete this file when that branch's
-- 018 is merged (tern refuses two files numbered 018).
SELECT 1;

---- create above / drop below ----

SELECT 1;
