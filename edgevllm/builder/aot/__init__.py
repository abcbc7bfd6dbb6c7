"""FlashInfer's AOT modules built into the image (``inv build --aot CONFIG``): ``modules`` reads
which modules a model asks for, ``plan`` writes the plan and stages the ``edgevllm-aot`` context,
and ``inimage_build`` builds them inside the image (stdlib only)."""
