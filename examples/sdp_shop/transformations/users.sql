CREATE MATERIALIZED VIEW active_users AS
SELECT day, count(DISTINCT user_id) AS users FROM parquet.`data/orders` GROUP BY day;

CREATE MATERIALIZED VIEW products_sold AS
SELECT count(DISTINCT product) AS products, count(DISTINCT cust) AS customers
FROM parquet.`data/orders`;
