"""flashcheck proofs: one lemma module + Markdown proof per derivation step, and the error bounds (bounds.py)."""
