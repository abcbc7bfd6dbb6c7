"""What is asked for: targets, build specs, refs and upstream URLs, mod selection, locks, the
CUDA rules and the mod outcomes they are judged by."""
