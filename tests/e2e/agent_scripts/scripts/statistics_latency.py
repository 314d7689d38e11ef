# Latency and revenue statistics with the statistics module.
import statistics

mrr = [c["mrr"] for c in [unwrap(get_customer(customer_id=f"c{n}")) for n in range(1, 9)]]
p99 = [unwrap(fetch_metrics(service=s))["p99_ms"] for s in ["api", "search", "export"]]
{
    "mean_mrr": statistics.mean(mrr),
    "median_mrr": statistics.median(mrr),
    "stdev_mrr": round(statistics.stdev(mrr), 1),
    "median_p99": statistics.median(p99),
}
