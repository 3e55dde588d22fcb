"""Phase 4: kernel runner, load generators (stressor, co-runners), GPU/CPU metrics and the collector."""
