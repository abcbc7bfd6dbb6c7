"""The container engine (Docker, local or remote, every call with a deadline), its run and build
options, and the host it runs on (emulation, free disk)."""
