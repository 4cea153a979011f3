# The planner's web app. CPU by default; a CUDA build of torch (for the Validate page) by a build argument:
#   docker build -t attention-planner .
#   docker build -t attention-planner:cuda --build-arg TORCH_VARIANT=cu128 .
#   docker run --rm -p 8501:8501 attention-planner            # CPU
#   docker run --rm --gpus all -p 8501:8501 attention-planner:cuda
# The torch wheels bundle the CUDA runtime; the host needs only the NVIDIA driver and container toolkit.
# .streamlit/config.toml binds to localhost; the container listens on 0.0.0.0 explicitly (CMD below). The
# WebSocket accepts only `Host: localhost` / 127.0.0.1 / ::1 (server.allowedHosts in config.toml, against DNS
# rebinding; the CMD does not override it): served under a hostname, pass -e STREAMLIT_SERVER_ALLOWED_HOSTS=that.host.
# GPU jobs from the Validate page are opt-in everywhere: -e PLANNER_ENABLE_GPU_JOBS=true (see docs/app.md).
# Linted in CI (hadolint, from requirements-dev.txt); the image itself cannot be built in this environment.
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ARG TORCH_VARIANT=cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY requirements.txt ./
# torch first, from the index of the chosen variant; requirements.txt's torch==2.13.0 is then already satisfied.
RUN pip install --index-url "https://download.pytorch.org/whl/${TORCH_VARIANT}" "torch==2.13.0" \
 && pip install -r requirements.txt

RUN useradd --create-home --uid 10001 app
COPY --chown=app:app . .
USER 10001

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).status != 200)"]

CMD ["streamlit", "run", "app.py", "--server.address=0.0.0.0", "--server.port=8501"]
