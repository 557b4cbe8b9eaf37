"""Prometheus metrics of the front end (--enable-metrics), in prometheus-client's own registry.

Counted where requests pass through the HTTP process, so no rank pays for them: requests by
endpoint and outcome, requests running, prompt and generated tokens, time to first token and the
time between streamed outputs. The schedulers' own load (requests running and queued, KV pool
tokens held by requests and by the prefix cache, and the share held by requests, as upstream's
sglang:num_running_reqs / num_queue_reqs / token_usage) comes with each DP group's heartbeat, so
it is at most about a second old.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        labels = {"model_name": model_name}
        self.requests = Counter("accord_requests", "Generation requests finished", ["model_name", "outcome"],
                                registry=self.registry)
        self.running = Gauge("accord_num_requests_running", "Generation requests in flight", ["model_name"],
                             registry=self.registry).labels(**labels)
        self.prompt_tokens = Counter("accord_prompt_tokens", "Prompt tokens of finished requests",
                                     ["model_name"], registry=self.registry).labels(**labels)
        self.generation_tokens = Counter("accord_generation_tokens", "Generated tokens of finished requests",
                                         ["model_name"], registry=self.registry).labels(**labels)
        self.ttft = Histogram("accord_time_to_first_token_seconds", "Time from arrival to the first output",
                              ["model_name"], buckets=LATENCY_BUCKETS, registry=self.registry).labels(**labels)
        self.itl = Histogram("accord_inter_token_latency_seconds", "Time between a request's outputs",
                             ["model_name"], buckets=LATENCY_BUCKETS, registry=self.registry).labels(**labels)
        group = ["model_name", "dp"]
        self.scheduler_running = Gauge("accord_num_running_reqs", "Requests a scheduler group is running",
                                       group, registry=self.registry)
        self.scheduler_queued = Gauge("accord_num_queue_reqs", "Requests waiting in a scheduler group's queue",
                                      group, registry=self.registry)
        self.kv_request_tokens = Gauge("accord_kv_request_tokens", "KV pool tokens reserved by requests",
                                       group, registry=self.registry)
        self.kv_cached_tokens = Gauge("accord_kv_cached_tokens", "KV pool tokens held by the prefix cache",
                                      group, registry=self.registry)
        self.kv_capacity_tokens = Gauge("accord_kv_capacity_tokens", "KV pool size in tokens",
                                        group, registry=self.registry)
        self.token_usage = Gauge("accord_token_usage", "Share of the KV pool reserved by requests (0-1)",
                                 group, registry=self.registry)
        self.model_name = model_name

    def scheduler_stats(self, dp: int, stats: dict) -> None:
        """A DP group's load, as its heartbeat reported it."""
        labels = {"model_name": self.model_name, "dp": str(dp)}
        self.scheduler_running.labels(**labels).set(stats["running"])
        self.scheduler_queued.labels(**labels).set(stats["queued"])
        self.kv_request_tokens.labels(**labels).set(stats["kv_request_tokens"])
        self.kv_cached_tokens.labels(**labels).set(stats["kv_cached_tokens"])
        self.kv_capacity_tokens.labels(**labels).set(stats["kv_capacity_tokens"])
        capacity = stats["kv_capacity_tokens"] or 1
        self.token_usage.labels(**labels).set(stats["kv_request_tokens"] / capacity)

    def track(self) -> "RequestTimer":
        return RequestTimer(self)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class RequestTimer:
    """One request's timings, reported as its outputs arrive."""

    def __init__(self, metrics: Metrics):
        self.metrics, self.start, self.last = metrics, time.monotonic(), None
        metrics.running.inc()

    def output(self, item: dict) -> None:
        now = time.monotonic()
        if self.last is None:
            self.metrics.ttft.observe(now - self.start)
        else:
            self.metrics.itl.observe(now - self.last)
        self.last = now
        if item.get("finished"):
            self.metrics.prompt_tokens.inc(item.get("prompt_tokens") or 0)
            self.metrics.generation_tokens.inc(item.get("completion_tokens") or 0)

    def done(self, outcome: str) -> None:
        self.metrics.running.dec()
        self.metrics.requests.labels(model_name=self.metrics.model_name, outcome=outcome).inc()
