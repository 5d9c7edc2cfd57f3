"""Java actions: missing artifacts, JDK versions and Gradle's heap.

``set_gradle_jvmargs`` runs on the build agent and edits the workspace's
gradle.properties; the ``suggest_*`` actions are worker-side advisors. No
network.
"""

from __future__ import annotations

import re
from pathlib import Path

from theow_workers import action

_COORD_PART = re.compile(r"[\w.+-]+")


@action("suggest_maven_artifact_fix", suggests=True)
def suggest_maven_artifact_fix(artifact: str, repository: str) -> dict:
    """Say how to make Maven or Gradle find a dependency artifact that a repository does not have."""
    parts = artifact.split(":")
    if not 3 <= len(parts) <= 5 or not all(_COORD_PART.fullmatch(p) for p in parts):
        return {"status": "error", "error": f"not Maven coordinates: {artifact!r}"}
    # Maven writes group:artifact:type[:classifier]:version, Gradle group:artifact:version.
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
            "settings.xml (Gradle: repositories {}); then rerun with -U (Gradle: "
            "--refresh-dependencies) so the cached miss is forgotten"
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


_JVM_SIZE = re.compile(r"(\d+)([kKmMgG])")
_UNIT_MB = {"k": 1 / 1024, "m": 1, "g": 1024}
_JVMARGS_LINE = re.compile(r"\s*org\.gradle\.jvmargs\s*[=:]\s*(.*)")


def _megabytes(size: str) -> float | None:
    match = _JVM_SIZE.fullmatch(size)
    return int(match.group(1)) * _UNIT_MB[match.group(2).lower()] if match else None


@action("set_gradle_jvmargs", client_side=True)
def set_gradle_jvmargs(workspace: str, xmx: str) -> dict:
    """Raise the Gradle daemon's heap (-Xmx in org.gradle.jvmargs) in the workspace's gradle.properties."""
    wanted = _megabytes(xmx)
    if wanted is None or not 256 <= wanted <= 65536:
        return {"status": "error", "error": f"not a heap size between 256m and 64g: {xmx!r}"}
    properties = Path(workspace) / "gradle.properties"
    flag = f"-Xmx{xmx}"
    lines = properties.read_text(encoding="utf-8").splitlines() if properties.is_file() else []
    # Setting jvmargs replaces Gradle's defaults, which include a metaspace cap: keep one.
    jvmargs = f"{flag} -XX:MaxMetaspaceSize=1g"
    for index, line in enumerate(lines):
        match = _JVMARGS_LINE.fullmatch(line)
        if not match:
            continue
        args = match.group(1).split()
        heaps = [size for a in args if a.startswith("-Xmx") and (size := _megabytes(a[4:]))]
        if heaps and max(heaps) >= wanted:
            return {"status": "ok", "changed": [], "jvmargs": " ".join(args)}
        jvmargs = " ".join([a for a in args if not a.startswith("-Xmx")] + [flag])
        lines[index] = f"org.gradle.jvmargs={jvmargs}"
        break
    else:
        lines.append(f"org.gradle.jvmargs={jvmargs}")
    properties.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"status": "ok", "changed": [str(properties)], "jvmargs": jvmargs}


_CLASS_FILE = re.compile(r"(\d{2})(?:\.0)?")


def java_release(required: str) -> int | None:
    """The Java release a build needs: from "17", "1.8", "21.0.2" or a class file version "61.0"."""
    text = required.strip()
    if text.startswith("1.") and text[2:].isdigit():
        return int(text[2:])
    if (match := _CLASS_FILE.fullmatch(text)) and int(match.group(1)) >= 45 and "." in text:
        return int(match.group(1)) - 44  # class file 52.0 is Java 8, 61.0 is 17
    head = text.split(".", 1)[0]
    return int(head) if head.isdigit() and 5 <= int(head) <= 44 else None


@action("suggest_jdk", suggests=True)
def suggest_jdk(required: str) -> dict:
    """Say which JDK a build needs when it targets (or was compiled for) a newer Java than it runs."""
    release = java_release(required)
    if release is None:
        return {"status": "error", "error": f"not a Java version: {required!r}"}
    return {
        "status": "ok",
        "required": required,
        "java": release,
        "fix": f"build with JDK {release} or newer (image eclipse-temurin:{release}, "
        f"actions/setup-java java-version: {release}, or a Gradle toolchain "
        f"languageVersion = JavaLanguageVersion.of({release}))",
    }
