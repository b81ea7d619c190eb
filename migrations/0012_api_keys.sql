-- API keys (issue 10). A key's secret is never stored: only its public
-- prefix (rt_sk_ or rt_pk_ and twelve characters, which identifies it) and
-- the SHA-256 of the whole token. The token holds 32 random bytes, so the
-- hash cannot be reversed by guessing; docs/auth.md says why no slow hash.

-- +goose Up
CREATE TABLE api_keys (
    id              uuid PRIMARY KEY,
    name            text NOT NULL CHECK (name <> ''),
    kind            text NOT NULL CHECK (kind IN ('secret', 'publishable')),
    prefix          text NOT NULL UNIQUE,
    hash            bytea NOT NULL CHECK (length(hash) = 32),
    scopes          text[] NOT NULL CHECK (cardinality(scopes) > 0),
    origins         text[] NOT NULL DEFAULT '{}',
    rate_count      integer NULL CHECK (rate_count > 0),
    rate_period_ms  bigint NULL CHECK (rate_period_ms > 0),
    concurrency     integer NOT NULL DEFAULT 0 CHECK (concurrency >= 0),
    models          text[] NOT NULL DEFAULT '{}',
    filter_doc_ids  text[] NOT NULL DEFAULT '{}',
    filter_metadata jsonb NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NULL,
    revoked_at      timestamptz NULL,
    last_used_at    timestamptz NULL,
    CHECK ((rate_count IS NULL) = (rate_period_ms IS NULL)),
    CHECK (kind = 'secret' OR (scopes = '{ask}' AND cardinality(origins) > 0))
);

COMMENT ON TABLE api_keys IS 'API keys made by `ragtime keys create`; keys are revoked, never deleted, so queries.key_id keeps pointing at one.';
COMMENT ON COLUMN api_keys.prefix IS 'The token''s public part (rt_sk_xxxxxxxxxxxx / rt_pk_...): identifies the key in lists; not a secret.';
COMMENT ON COLUMN api_keys.hash IS 'SHA-256 of the whole token. The token itself is shown once at creation and stored nowhere.';
COMMENT ON COLUMN api_keys.scopes IS 'ask, read, documents, admin (admin implies the others).';
COMMENT ON COLUMN api_keys.origins IS 'Browser origins (scheme://host[:port]) the key may be used from; required for publishable keys.';
COMMENT ON COLUMN api_keys.rate_count IS 'Asks allowed per rate_period_ms; NULL: no per-key rate.';
COMMENT ON COLUMN api_keys.concurrency IS 'Streams the key may hold at once; 0: no per-key limit.';
COMMENT ON COLUMN api_keys.models IS 'Models the key may ask for; empty: any the server allows.';
COMMENT ON COLUMN api_keys.filter_doc_ids IS 'Tenant filter: every search made with the key is restricted to these documents (empty: no document restriction).';
COMMENT ON COLUMN api_keys.filter_metadata IS 'Tenant filter: every search made with the key is restricted to chunks whose metadata has all these pairs.';
COMMENT ON COLUMN api_keys.last_used_at IS 'Last successful use, written by serve every few seconds (so up to a few seconds behind).';

-- +goose Down
DROP TABLE api_keys;
