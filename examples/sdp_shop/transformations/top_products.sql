CREATE TEMPORARY VIEW product_sales AS
SELECT p.category, o.product, sum(o.amount) AS sales
FROM parquet.`data/orders` o JOIN parquet.`data/products` p ON o.product = p.product
GROUP BY p.category, o.product;

-- the ten best-selling products of every category
CREATE MATERIALIZED VIEW top_products AS
SELECT category, product, sales, rnk FROM (
  SELECT category, product, sales,
         rank() OVER (PARTITION BY category ORDER BY sales DESC) AS rnk
  FROM product_sales)
WHERE rnk <= 10;
