"""ORM models of market data, forecasts and energy contracts: persistence only (the rest: :mod:`app.models`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Enum, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db import Base, utcnow
from app.enums import ForecastRunStatus, SeriesKind


def _enum(cls: type, name: str) -> Enum:
    return Enum(cls, name=name, native_enum=False, length=24, values_callable=lambda e: [m.value for m in e])


class MarketSeries(Base):
    """Published or realised market data points (prices, carbon intensity, load, TSO forecasts)."""

    __tablename__ = "market_series"
    __table_args__ = (
        UniqueConstraint("zone", "kind", "source", "ts", name="uq_market_series_point"),
        Index("ix_market_series_zone_kind_ts", "zone", "kind", "ts"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    zone: Mapped[str] = mapped_column(String(32))
    kind: Mapped[SeriesKind] = mapped_column(_enum(SeriesKind, "series_kind"))
    ts: Mapped[datetime]
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(24))
    source: Mapped[str] = mapped_column(String(64), default="import")
    issued_at: Mapped[datetime | None]  # for published forecasts (e.g. TSO day-ahead load)
    quantiles: Mapped[dict[str, Any] | None] = mapped_column()
    # how long the value holds from ts [min]: 60 hourly, 15 for quarter-hour products (migration 0008)
    resolution_minutes: Mapped[int] = mapped_column(Integer, default=60, server_default="60")


class ForecastRun(Base):
    """One refresh of one (zone, kind) forecast; the last succeeded run stays in force when a later one fails."""

    __tablename__ = "forecast_runs"
    __table_args__ = (Index("ix_forecast_runs_zone_kind_issued", "zone", "kind", "issued_at"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    zone: Mapped[str] = mapped_column(String(32))
    kind: Mapped[SeriesKind] = mapped_column(_enum(SeriesKind, "series_kind"))
    model: Mapped[str] = mapped_column(String(64))
    issued_at: Mapped[datetime]
    status: Mapped[ForecastRunStatus] = mapped_column(_enum(ForecastRunStatus, "forecast_status"))
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    points: Mapped[list[ForecastPoint]] = relationship(cascade="all, delete-orphan", order_by="ForecastPoint.ts")


class ForecastPoint(Base):
    __tablename__ = "forecast_points"
    __table_args__ = (UniqueConstraint("run_id", "ts"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("forecast_runs.id", ondelete="CASCADE"))
    ts: Mapped[datetime]
    value: Mapped[float] = mapped_column(Float)
    quantiles: Mapped[dict[str, Any] | None] = mapped_column()  # {"0.1": v, "0.9": v}


class ModelSelection(Base):
    """Per (zone, kind) the forecasting model chosen by its latest backtest."""

    __tablename__ = "model_selections"
    __table_args__ = (UniqueConstraint("zone", "kind"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    zone: Mapped[str] = mapped_column(String(32))
    kind: Mapped[SeriesKind] = mapped_column(_enum(SeriesKind, "series_kind"))
    model: Mapped[str] = mapped_column(String(64))
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    backtested_at: Mapped[datetime] = mapped_column(default=utcnow)


class EnergyContract(Base):
    """A supply contract (PPA, guarantees of origin) for market-based carbon accounting."""

    __tablename__ = "energy_contracts"
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    share: Mapped[float] = mapped_column(Float)  # fraction of consumption covered
    carbon_g_per_kwh: Mapped[float] = mapped_column(Float)
