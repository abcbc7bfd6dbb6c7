"""What a server's start leaves behind: JIT cache bundles (``bundle``: the checked file,
``harvest``: filled from a container, seeded into one), the driver's compute cache (``compute``),
and an image, weights and caches put on every node (``distribute``)."""
