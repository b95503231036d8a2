-- revenue per country and day: orders joined with their customers
CREATE MATERIALIZED VIEW daily_revenue AS
SELECT c.country, o.day, sum(o.amount) AS revenue, count(*) AS orders
FROM parquet.`data/orders` o JOIN parquet.`data/customers` c ON o.cust = c.id
GROUP BY c.country, o.day;

-- a view over another view
CREATE MATERIALIZED VIEW country_totals AS
SELECT country, sum(revenue) AS revenue, sum(orders) AS orders
FROM daily_revenue GROUP BY country;
