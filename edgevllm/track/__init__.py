"""``inv track``: what a newer vLLM release means for an image, before building it
(docs/track.md)."""
