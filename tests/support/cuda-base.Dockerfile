# Test stand-in for nvidia/cuda:13.0.x-devel: NVIDIA's CUDA 13.0 compiler wheels from PyPI,
# unpacked into the toolkit layout nvcc.profile expects ($TOP/bin, $TOP/nvvm, $TOP/include, $TOP/lib).
ARG BASE
FROM ${BASE}
RUN --mount=type=bind,target=/wheels \
    mkdir -p /tmp/cuda && \
    for w in /wheels/*.whl; do python3 -m zipfile -e "$w" /tmp/cuda; done && \
    mv /tmp/cuda/nvidia/cu13 /usr/local/cuda-13.0 && rm -rf /tmp/cuda && \
    ln -s lib /usr/local/cuda-13.0/lib64 && \
    ln -s libcudart.so.13 /usr/local/cuda-13.0/lib/libcudart.so && \
    chmod +x /usr/local/cuda-13.0/bin/* /usr/local/cuda-13.0/nvvm/bin/* && \
    ln -s /usr/local/cuda-13.0 /usr/local/cuda
ENV CUDA_HOME=/usr/local/cuda \
    PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CUDA_VERSION=13.0.2
