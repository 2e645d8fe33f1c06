"""Everything about vLLM's Prometheus metrics: names, the labels pods are scraped with, PromQL, queries."""
