"""Prometheus metrics of the front end (--enable-metrics), in prometheus-client's own registry.

Counted where requests pass through the HTTP process, so no rank pays for them: requests by
endpoint and outcome, requests running, prompt and generated tokens, time to first token and the
time between streamed outputs.
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
        self.model_name = model_name

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
