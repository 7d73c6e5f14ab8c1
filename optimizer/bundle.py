"""Short jobs share a slot: jobs shorter than a slot that could run one after another on the same GPUs are planned as
one bundle, so a quarter-hour of one GPU holds several 20-second jobs instead of one.

The optimizer places whole slots; a job of a few seconds would otherwise hold its GPUs and its power for the whole
slot. :func:`bundle_short_jobs` packs such jobs into bundles before the solve: jobs alike in everything the planner
looks at (GPUs, hardware and its power, memory, regions, priority), not interruptible, each fitting one slot, whose
windows still share a slot, and whose real run times together fit one slot on every hardware type they may use. A
bundle is one job of one slot, with the latest release and earliest deadline of its members; its power is a member's
(they run one after another, never at once). :func:`unbundle` turns the bundle's placement back into one assignment
per member, on the same slot, region and hardware; the caller runs the members back to back in the bundle's order
(:attr:`Bundles.members`). Pure: ``Problem`` in, ``Problem`` out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from optimizer.plan import Assignment, Plan, Unplanned
from optimizer.problem import Job, Problem

#: Prefix of a bundle's job id (never a job's own: ids of the app's jobs are integers).
BUNDLE_PREFIX = "bundle:"


@dataclass(frozen=True, slots=True)
class Bundles:
    """The bundles of a problem: each bundle's job id and its members, in the order they run."""

    members: Mapping[str, tuple[str, ...]]

    def of(self, job_id: str) -> tuple[str, ...]:
        """The members of ``job_id`` if it is a bundle, else the job alone."""
        return self.members.get(job_id, (job_id,))


def _key(job: Job) -> tuple:
    """What a bundle's members must share (the planner sees one job for them)."""
    return (
        job.gpus, tuple(sorted(job.power_kw_per_gpu.items())), job.memory_gb_per_gpu, job.allowed_regions,
        job.allowed_hardware, tuple(sorted(job.duration_slots)), job.home_region, job.preferred_hardware,
        job.priority, job.tenant,  # a bundle is one tenant's: fair share and budgets count per tenant
    )


def bundle_short_jobs(
    problem: Problem, minutes: Mapping[str, Mapping[str, float]], offsets: Mapping[str, float]
) -> tuple[Problem, Bundles]:
    """``problem`` with jobs shorter than a slot packed into bundles of one slot, and the bundles.

    Parameters
    ----------
    problem : Problem
        The problem.
    minutes : Mapping[str, Mapping[str, float]]
        Each job's real run time per hardware type [min]; jobs missing here are left alone.
    offsets : Mapping[str, float]
        How far into its release slot each job's earliest start lies [min] (``TimeGrid.release_offset_minutes``).
    """
    sm = problem.slot_minutes
    groups: dict[tuple, list[Job]] = {}
    for job in problem.jobs:
        if (job.interruptible or job.job_id not in minutes or not job.duration_slots
                or any(d != 1 for d in job.duration_slots.values())):
            continue
        groups.setdefault(_key(job), []).append(job)
    packed: dict[str, tuple[str, ...]] = {}
    replaced: dict[str, Job] = {}
    for group in groups.values():
        if len(group) <= _side_by_side(problem, group[0]):
            continue
        group.sort(key=lambda j: (j.deadline_slot, j.release_slot, j.job_id))
        current: list[Job] = []
        nxt: Job | None
        for nxt in [*group, None]:
            if nxt is not None and current and _fits([*current, nxt], minutes, offsets, sm):
                current.append(nxt)
                continue
            if len(current) > 1:
                bundle = _bundle_job(current)
                packed[bundle.job_id] = tuple(j.job_id for j in current)
                for j in current:
                    replaced[j.job_id] = bundle
            current = [nxt] if nxt is not None else []
    if not packed:
        return problem, Bundles({})
    jobs: list[Job] = []
    seen: set[str] = set()
    for each in problem.jobs:
        into = replaced.get(each.job_id)
        if into is None:
            jobs.append(each)
        elif into.job_id not in seen:
            seen.add(into.job_id)
            jobs.append(into)
    return dataclasses.replace(problem, jobs=tuple(jobs)), Bundles(packed)


def _side_by_side(problem: Problem, job: Job) -> int:
    """How many jobs like ``job`` the fleet's inventory could run at once [jobs]."""
    gpus = 0
    for region in problem.regions:
        if job.allowed_regions is None or region.name in job.allowed_regions:
            gpus += sum(n for hw, n in region.inventory.items() if hw in job.duration_slots
                        and (job.allowed_hardware is None or hw in job.allowed_hardware))
    return gpus // max(1, job.gpus)


def _fits(jobs: list[Job], minutes: Mapping[str, Mapping[str, float]], offsets: Mapping[str, float], sm: int) -> bool:
    """Whether ``jobs`` still share a slot of their windows and, one after another, fit one slot on every hardware."""
    if min(j.deadline_slot for j in jobs) - max(j.release_slot for j in jobs) < 1:
        return False
    lead = max(offsets.get(j.job_id, 0.0) for j in jobs)
    return all(lead + sum(minutes[j.job_id][hw] for j in jobs) <= sm + 1e-9 for hw in jobs[0].duration_slots)


def _bundle_job(members: list[Job]) -> Job:
    first = members[0]
    return dataclasses.replace(
        first, job_id=f"{BUNDLE_PREFIX}{first.job_id}", release_slot=max(j.release_slot for j in members),
        deadline_slot=min(j.deadline_slot for j in members),
    )


def unbundle(plan: Plan, bundles: Bundles) -> Plan:
    """``plan`` with each bundle's assignment (or its place among the left out) given to each of its members.

    A member's energy, cost and carbon are the bundle's shared out equally; the caller computes each member's own
    figures over its real interval.
    """
    if not bundles.members:
        return plan
    assignments: list[Assignment] = []
    for a in plan.assignments:
        members = bundles.of(a.job_id)
        n = len(members)
        assignments.extend(dataclasses.replace(a, job_id=m, energy_kwh=a.energy_kwh / n, cost=a.cost / n,
                                               carbon_kg=a.carbon_kg / n) for m in members)
    unplanned = [Unplanned(m, u.reason, u.detail) for u in plan.unplanned for m in bundles.of(u.job_id)]
    return dataclasses.replace(plan, assignments=tuple(assignments), unplanned=tuple(unplanned))
