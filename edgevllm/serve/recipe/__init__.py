"""Launch recipes: schema, ``--set`` values, the template sandbox, loading and rendering (``load``),
eugr's recipes imported (``importer``, ``importfolder``, ``buildargs``), and the image a recipe
needs as build spec fields (``build``)."""
