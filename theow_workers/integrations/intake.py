"""A hooked job, from its log to a submission or a passing run, as the client would send it.

The worker reads the log from the forge and then does what ``theow-client
run`` does on a build agent: ``build_payload`` bounds the facts (keeping the
error windows of a long log) and masks secrets in them; a passing job's log goes
through ``build_passing_payload``, sampled per job and interval as the client
samples (``theow_client.passing``). The submission's idempotency key is the
job's (``HookedJob.key``): resolved twice, it is the same failure.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from theow_client import names
from theow_client.client import build_payload
from theow_client.jsontypes import JsonObject
from theow_client.messages import PassingRun, SubmitRequest
from theow_client.passing import build_passing_payload, passing_interval
from theow_workers.adapters.forges import ForgeAPI
from theow_workers.core.logs.normal import passing_run
from theow_workers.integrations.hooks import HookedJob

if TYPE_CHECKING:
    from theow_workers.runtime import Runtime

log = logging.getLogger("theow.hooks")


def submission(job: HookedJob, log_text: str) -> SubmitRequest:
    """The failure as the client would submit it from inside the job."""
    payload = build_payload(
        job.facts(log_text),
        agent=job.agent,
        idempotency_key=job.key,
        source=f"{job.forge}-webhook",
    )
    return SubmitRequest.from_wire(payload)


def learn_passing(rt: Runtime, api: ForgeAPI, job: HookedJob) -> JsonObject:
    """Teach the job's normal from this passing run, unless one was learned this interval.

    Only a run of the repository's default branch teaches: a fork's pull request
    names its jobs as it likes, and must not teach the base repository what is normal.
    """
    if not job.default_branch:
        return {"learned": False, "reason": "not a run of the repository's default branch"}
    if not rt.normals.sample(names.agent_job(job.agent, job.job), int(passing_interval())):
        return {"learned": False, "reason": "a passing run of this job was learned this interval"}
    facts = job.facts(api.job_log(job))
    learned_job, lines = passing_run(
        PassingRun.from_wire(build_passing_payload(facts, job=job.job))
    )
    kept = rt.normals.learn(names.agent_job(job.agent, learned_job), lines)
    log.info(
        "job %s: passing run from the %s webhook learned, %d templates", job.job, job.forge, kept
    )
    return {"learned": True, "job": job.job, "templates": kept}
