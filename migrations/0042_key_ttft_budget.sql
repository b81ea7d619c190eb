-- A key's TTFT budget (issue 33): the ttft_budget_ms an ask made with the
-- key gets when it gives none. An ask's own ttft_budget_ms wins over it, and
-- it wins over serve's --ttft-budget-ms.

-- +goose Up
ALTER TABLE api_keys
    ADD COLUMN ttft_budget_ms integer NULL CHECK (ttft_budget_ms > 0 AND ttft_budget_ms <= 600000);

COMMENT ON COLUMN api_keys.ttft_budget_ms IS 'The ttft_budget_ms an ask made with the key gets when it gives none (keys create, flag ttft-budget); it wins over serve''s default. NULL: serve''s default.';

-- +goose Down
ALTER TABLE api_keys DROP COLUMN ttft_budget_ms;
