"""Layer 3, runtime orchestration on simpy: ``serving`` (continuous batching, disaggregation,
capacity plans), ``timeline`` (one training step played out over time), ``cluster`` (a cluster
over weeks: queues, placement, failures, restarts)."""
