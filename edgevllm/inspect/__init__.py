"""What is inside an image, and where it came from: ``inv diff`` (two images, published sets or
locks compared from their labels, lock and layer list), the SBOM (CycloneDX, from the lock and the
installed distributions) and signed provenance (an in-toto statement in a DSSE envelope)."""
