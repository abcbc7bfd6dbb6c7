# Level-2 probe fixture: `vllm` is a stdlib HTTP server that serves the endpoints the probe uses.
ARG BASE
FROM ${BASE}
COPY fake_vllm_serve.py /usr/local/bin/vllm
RUN chmod 0755 /usr/local/bin/vllm
