"""Import of tau2-bench results files (sierra-research/tau2-bench)."""
