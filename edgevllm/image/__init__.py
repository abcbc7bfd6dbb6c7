"""A built image as files: publish and load (parts, compressors), the records it carries, the
layer cache and store, registry pushes and the compiled-wheels artifact."""
