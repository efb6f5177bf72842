-- Which Stripe customer each key bills to, for reconciler stripe-sync: a
-- key without a row here is not sent to Stripe (skipped and counted).
-- Set with reconciler stripe-customer set; a change applies to the events
-- sent after it (events already sent stay on the customer they named).
CREATE TABLE stripe_customers (
    key                text        PRIMARY KEY,
    stripe_customer_id text        NOT NULL CHECK (stripe_customer_id ~ '^cus_[A-Za-z0-9]+$'),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE stripe_customers IS 'key -> Stripe customer id; written by reconciler stripe-customer set, read by reconciler stripe-sync.';

---- create above / drop below ----

DROP TABLE stripe_customers;
