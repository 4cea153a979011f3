"""One attention call: its configuration, which backend runs it, what it allocates (timelines and the caching
allocator replay), its FLOPs and time. `attention.estimate_call` is the entry point."""
