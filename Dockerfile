# One image, three process roles (web, worker, beat) that differ only in their command.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN apt-get update && apt-get install -y --no-install-recommends build-essential && rm -rf /var/lib/apt/lists/*
WORKDIR /srv/gridshift
COPY pyproject.toml README.md ./
COPY app ./app
COPY optimizer ./optimizer
COPY forecasting ./forecasting
COPY connectors ./connectors
COPY migrations ./migrations
COPY web ./web
RUN pip install --no-cache-dir '.[runtimes]'
RUN useradd --system --uid 1000 gridshift && mkdir -p /srv/gridshift/var && chown gridshift /srv/gridshift/var
USER gridshift
EXPOSE 8000
CMD ["gunicorn", "--bind", "0.0.0.0:8000", "--workers", "4", "--timeout", "60", "--preload", "app.wsgi:app"]
