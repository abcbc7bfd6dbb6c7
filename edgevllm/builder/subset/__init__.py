"""A partial kernel build (``inv build --compile --extensions A,B``, a target's leave-out):
``plan`` restricts the tree and stages the ``edgevllm-extensions`` context, and
``inimage_cmake`` stands first on PATH as ``cmake`` in the compile stage (stdlib only)."""
