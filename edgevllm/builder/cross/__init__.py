"""The compile mode's cross road: ``context`` stages the ``edgevllm-cross`` build context (the
toolchain file the caller rendered, the in-image scripts) and the build tools for the builder's
platform; ``inimage_stage`` lays out the target's side inside the build stage and
``inimage_run`` is the toolchain's emulator (both stdlib only)."""
