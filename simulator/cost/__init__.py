"""Step cost model: ops with FLOPs and bytes, latency models, collectives, step time."""
