"""Plot: shared style and plotting functions (each takes ``ax=None`` and returns what it drew on)."""
