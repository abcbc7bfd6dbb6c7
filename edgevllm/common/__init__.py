"""What every layer uses: errors with their exit codes, the console, paths, atomic writes,
schemas, grammars, label names and in-image paths."""
