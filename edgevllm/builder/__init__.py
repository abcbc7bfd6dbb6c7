"""The build pipeline (``build()``): the mode decided once, its preparation (``modes/``), the
seam (``prepared``), the tail every mode shares, ``inv render`` and the buildx runner."""
