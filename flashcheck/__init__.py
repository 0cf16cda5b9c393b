"""flashcheck: numerically verified FlashAttention (front door: `python -m flashcheck`)."""
__version__ = "0.1.0"
