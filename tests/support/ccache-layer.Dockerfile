# The CUDA test image plus Debian's ccache (the real package, >= 4.6: remote storage), installed
# from .deb files downloaded on the host (build steps have no network here).
ARG BASE
FROM ${BASE}
RUN --mount=type=bind,target=/debs dpkg -i /debs/*.deb && ccache --version | head -1
