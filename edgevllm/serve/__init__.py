"""Serving built images: launch recipes, and the caches a server fills.

Launching stands here: ``launch`` (one engine), ``cluster`` (N nodes), ``rdma`` (can NCCL reach
the NICs), ``starttime`` (how long a start took), and the two files that run inside a container
(stdlib only): ``inimage_entry`` and ``inimage_startprobe``. The two wings below it:

* ``recipe/``: what a launch recipe is and how it becomes a ``docker run``: its schema, its
  ``--set`` values, the template sandbox, loading and rendering, eugr's recipes imported, and the
  image a recipe needs as build spec fields.
* ``cache/``: what a server's start leaves behind: JIT cache bundles (``inv warm`` harvests them,
  ``inv serve --caches`` seeds them), the driver's compute cache, and putting an image, weights
  and caches on every node of a cluster.
"""
