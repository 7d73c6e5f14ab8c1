# One image, three process roles (web, worker, beat) and the one-shot migrate job; they differ only in their command.
# Two stages: `build` resolves nothing (it installs exactly uv.lock, the runtimes extra included) and may compile;
# the final image gets the finished virtualenv and the source, and no compiler or build tool.

FROM python:3.11-slim AS build
ENV PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/opt/venv UV_PYTHON_DOWNLOADS=never
RUN apt-get update && apt-get install -y --no-install-recommends build-essential && rm -rf /var/lib/apt/lists/*
# uv as pinned in the Makefile (UV_VERSION)
RUN pip install --no-cache-dir uv==0.13.9
WORKDIR /srv/gridshift
# The dependencies first, from the lock alone: this layer is rebuilt only when uv.lock or pyproject.toml change.
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --locked --no-install-project --extra runtimes
COPY app ./app
COPY optimizer ./optimizer
COPY forecasting ./forecasting
COPY connectors ./connectors
COPY migrations ./migrations
COPY web ./web
# The project itself, editable: app/ finds migrations/ and web/ beside it, at the same path in the final image.
RUN uv sync --locked --extra runtimes

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH
COPY --from=build /opt/venv /opt/venv
COPY --from=build /srv/gridshift /srv/gridshift
WORKDIR /srv/gridshift
RUN useradd --system --uid 1000 gridshift && mkdir -p /srv/gridshift/var && chown gridshift /srv/gridshift/var
USER gridshift
EXPOSE 8000
CMD ["gunicorn", "--bind", "0.0.0.0:8000", "--workers", "4", "--timeout", "60", "--preload", "app.wsgi:app"]
