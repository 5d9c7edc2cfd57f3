"""Java/Maven advisors. Worker-side and pure: no network, no workspace."""

from __future__ import annotations

import re

from theow_workers import action

_COORD_PART = re.compile(r"[\w.-]+")


@action("suggest_maven_artifact_fix")
def suggest_maven_artifact_fix(artifact: str, repository: str) -> dict:
    """Say how to make Maven find a dependency artifact that a repository does not have."""
    parts = artifact.split(":")
    if not 4 <= len(parts) <= 5 or not all(_COORD_PART.fullmatch(p) for p in parts):
        return {"status": "error", "error": f"not Maven coordinates: {artifact!r}"}
    group_id, artifact_id, version = parts[0], parts[1], parts[-1]
    coordinates = f"{group_id}:{artifact_id}:{version}"
    if version.endswith("-SNAPSHOT"):
        fix = (
            f"{coordinates} is a SNAPSHOT nobody published to {repository}: build and install "
            "the module that produces it first (mvn -pl <module> -am install), or depend on a "
            "released version"
        )
    else:
        fix = (
            f"check that {coordinates} exists in {repository} (typo, unreleased or removed "
            "version?); if it lives in another repository, add that repository or mirror to "
            "settings.xml; then rerun with -U so Maven forgets the cached miss"
        )
    return {
        "status": "ok",
        "group_id": group_id,
        "artifact_id": artifact_id,
        "version": version,
        "repository": repository,
        "snapshot": version.endswith("-SNAPSHOT"),
        "fix": fix,
    }
