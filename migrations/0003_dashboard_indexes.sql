-- Indexes that keep the dashboard views fast on tens of millions of queries.
-- Every view is meant to be read for a recent window (the last hour, the last
-- day); these indexes turn such a window into an index range scan instead of
-- a scan of the whole table. See docs/sql.md for the plans at 10M queries.

-- +goose Up

-- Keyset pagination of GET /v1/queries (newest first, ties broken by id) and
-- every "created_at >= since" window. It replaces the plain created_at index.
CREATE INDEX queries_created_at_id_idx ON queries (created_at DESC, id DESC);
DROP INDEX queries_created_at_idx;

-- The hour bucket the hourly views group by. A filter on the views' "hour"
-- column is pushed below the GROUP BY by the planner and lands on this
-- expression. date_trunc on a timestamptz depends on the session time zone
-- and cannot be indexed; on the UTC timestamp it is immutable.
CREATE INDEX queries_hour_idx ON queries ((date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'));

-- Listing one model's or one status's queries (GET /v1/queries?model=...).
CREATE INDEX queries_model_created_at_idx ON queries (model, created_at DESC);
CREATE INDEX queries_status_created_at_idx ON queries (status, created_at DESC) WHERE status <> 'ok';

-- +goose Down
DROP INDEX queries_status_created_at_idx;
DROP INDEX queries_model_created_at_idx;
DROP INDEX queries_hour_idx;
CREATE INDEX queries_created_at_idx ON queries (created_at);
DROP INDEX queries_created_at_id_idx;
