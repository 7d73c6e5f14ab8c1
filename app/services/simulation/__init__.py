"""What-if replays of a past period: the engine on plain data (:mod:`.engine`), the scenarios a user may ask for
(:mod:`.scenario`), the stored history read from the database (:mod:`.history`) and the simulations asked for
through the API (:mod:`.runs`). docs/simulation.md describes the method and its limits."""

from app.services.simulation.engine import History, Outcome, SettledRun, compare, replay
from app.services.simulation.scenario import RegionChange, Scenario

__all__ = ["History", "Outcome", "RegionChange", "Scenario", "SettledRun", "compare", "replay"]
