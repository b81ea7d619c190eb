-- A roll-up row holds its histogram inline: a bigint[] of 8 bytes a bucket
-- from the lowest bucket used to the highest (an hour of one stage spans a
-- few hundred, 2–6 KB). Past about 2 KB a row is over PostgreSQL's default
-- toast_tuple_target, so every upsert of it (every recorder batch adds to
-- the current minute's and hour's rows of every stage) first tried to
-- compress the new histogram with pglz, and mostly failed to (the counts
-- of such an array do not compress by the quarter pglz asks for). While
-- 2,000 streams were held, pglz_compress was 44 % of PostgreSQL's CPU
-- (perf over its backends, make bench-streams: 110 ms of CPU a second for
-- some 150 records a second), all of it thrown away.
--
-- A roll-up row now stays inline and uncompressed up to the most a page
-- holds (toast_tuple_target 8160 bytes, about a thousand buckets), and a
-- wider histogram is moved out of line without a compression attempt
-- (STORAGE EXTERNAL). Stored rows are read as before; each is written the
-- new way at its next upsert. Nothing reads the histograms differently.

-- +goose Up
ALTER TABLE query_rollups SET (toast_tuple_target = 8160);
ALTER TABLE query_rollups ALTER COLUMN hist SET STORAGE EXTERNAL;

-- +goose Down
ALTER TABLE query_rollups ALTER COLUMN hist SET STORAGE EXTENDED;
ALTER TABLE query_rollups RESET (toast_tuple_target);
