"""Which job a run belongs to: the key its passing runs are learned under.

A failure is compared with the passing runs of the *same job*, so the key
must be the same for every run of a job and differ between jobs. In order:

1. the ``job`` fact, when the submitter gives one;
2. the CI system's own variables, prefixed with the repository when known:

   ============== =====================================================
   GitHub Actions ``GITHUB_REPOSITORY`` / ``GITHUB_WORKFLOW`` / ``GITHUB_JOB``
   GitLab CI      ``CI_PROJECT_PATH`` / ``CI_JOB_NAME``
   Jenkins        ``JOB_NAME`` (and ``STAGE_NAME`` when set)
   Travis CI      ``TRAVIS_REPO_SLUG`` / ``TRAVIS_JOB_NAME``
   Buildkite      ``BUILDKITE_PIPELINE_SLUG`` / ``BUILDKITE_STEP_KEY``
   ============== =====================================================

3. none: the run is handled as if its job had no passing runs.

>>> job_of({}, {"GITHUB_REPOSITORY": "o/r", "GITHUB_WORKFLOW": "CI", "GITHUB_JOB": "test"})
'github:o/r/CI/test'
>>> job_of({"job": "nightly"}, {"JOB_NAME": "x"})
'nightly'
"""

from __future__ import annotations

from collections.abc import Mapping

from theow_client.jsontypes import Json

MAX_JOB_CHARS = 200

# (system, variables that must all be set, optional variables appended when set)
_CI_JOBS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("github", ("GITHUB_REPOSITORY", "GITHUB_WORKFLOW", "GITHUB_JOB"), ()),
    ("gitlab", ("CI_PROJECT_PATH", "CI_JOB_NAME"), ()),
    ("gitlab", ("CI_JOB_NAME",), ()),
    ("jenkins", ("JOB_NAME",), ("STAGE_NAME",)),
    ("travis", ("TRAVIS_REPO_SLUG", "TRAVIS_JOB_NAME"), ()),
    ("buildkite", ("BUILDKITE_PIPELINE_SLUG", "BUILDKITE_STEP_KEY"), ()),
)


def job_of(facts: Mapping[str, Json], environ: Mapping[str, str]) -> str | None:
    """The job key of a run from its facts, else from the CI system's variables."""
    given = facts.get("job")
    if isinstance(given, str | int) and str(given).strip():
        return str(given).strip()[:MAX_JOB_CHARS]
    for system, required, optional in _CI_JOBS:
        values = [environ.get(name, "").strip() for name in required]
        if all(values):
            values += [environ[name].strip() for name in optional if environ.get(name, "").strip()]
            return f"{system}:{'/'.join(values)}"[:MAX_JOB_CHARS]
    return None


def job_fact(facts: Mapping[str, Json]) -> str | None:
    """The job key a worker reads from submitted facts (the client put it in ``job``)."""
    return job_of(facts, {})
