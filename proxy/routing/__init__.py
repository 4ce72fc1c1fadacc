"""Where a request goes: the slot map, single-slot routing with redirects, cross-slot splitting and fan-out with reply merging."""
