"""Mods: their manifests and catalog, the in-image applier, source patches, eugr's mods
imported, MoE tuning."""
