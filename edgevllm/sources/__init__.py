"""A build's sources: git mirrors, requests and cherry-picks, prepared trees, the kernel plan,
CMake dependencies, build requirements and the wheel closure."""
