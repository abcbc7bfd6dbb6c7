"""edgevllm: patched, verified vLLM images for Jetson AGX Thor and DGX Spark."""

__version__ = "0.1.0"
