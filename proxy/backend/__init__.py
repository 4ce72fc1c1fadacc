"""The proxy's connections to cluster nodes: pipelined, multiplexed, reconnecting."""
