"""Phase 5: kernel latency features and regressors."""
