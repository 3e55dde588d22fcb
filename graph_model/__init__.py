"""Phase 6: kernel DAGs, sequential latency sum, and the host/GPU overlap simulator."""
