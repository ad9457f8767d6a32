"""SparseLab."""
