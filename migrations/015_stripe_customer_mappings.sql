-- Dated customer mappings (issue 36): a key's Stripe customer from an
-- instant on. A period is billed to the customer mapped at its last
-- instant, and a correction of a period to the customer its first event
-- named, so re-mapping a key never moves a past period's usage, or a
-- credit for it, to the new customer. stripe_customers keeps the current
-- mapping (the latest valid_from) for reading.
CREATE TABLE stripe_customer_mappings (
    key                text        NOT NULL,
    valid_from         timestamptz NOT NULL, -- '-infinity': every period
    stripe_customer_id text        NOT NULL CHECK (stripe_customer_id ~ '^cus_[A-Za-z0-9]+$'),
    anchor_day         int         CHECK (anchor_day BETWEEN 1 AND 31),
    time_zone          text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, valid_from),
    CHECK ((anchor_day IS NULL) = (time_zone IS NULL))
);

COMMENT ON TABLE stripe_customer_mappings IS 'key -> Stripe customer from valid_from on; a period goes to the mapping in force at its last instant.';

INSERT INTO stripe_customer_mappings (key, valid_from, stripe_customer_id, anchor_day, time_zone)
SELECT key, '-infinity', stripe_customer_id, anchor_day, time_zone FROM stripe_customers;

---- create above / drop below ----

DROP TABLE stripe_customer_mappings;
