"""flashcheck proofs: one lemma module + Markdown proof per derivation step, and the error bounds (bounds.py)."""
if __name__ != "flashcheck.proofs":  # one module object per file: ARCHITECTURE.md, "Import names"
    raise ImportError(f"import flashcheck.proofs, not {__name__} (the checkout's proofs/ is flashcheck.proofs)")
