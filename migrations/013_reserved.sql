-- Number 013 belongs to a migration of the same issue made alongside this
-- one; this empty file keeps the numbering contiguous (the migrator refuses
-- a gap) until that migration takes its place. It changes nothing.
SELECT 1;

---- create above / drop below ----

SELECT 1;
