"""Java actions: Gradle's heap, which JDK, and Gradle-style coordinates."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.core.actions import ActionError, ActionRegistry, call_action, load_actions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry() -> ActionRegistry:
    return load_actions(ROOT / "actions")


def run(registry, name, workspace=None, **params):
    return call_action(registry.get(name), params, workspace=str(workspace) if workspace else None)


# --- set_gradle_jvmargs -------------------------------------------------------------


def test_gradle_jvmargs_are_added_once_with_a_metaspace_cap(registry, tmp_path):
    props = tmp_path / "gradle.properties"
    props.write_text("org.gradle.caching=true\n")
    out = run(registry, "set_gradle_jvmargs", tmp_path, xmx="4g")
    assert out["changed"] == [str(props)]
    assert props.read_text() == (
        "org.gradle.caching=true\norg.gradle.jvmargs=-Xmx4g -XX:MaxMetaspaceSize=1g\n"
    )
    assert run(registry, "set_gradle_jvmargs", tmp_path, xmx="4g")["changed"] == []


def test_gradle_jvmargs_raise_the_heap_and_keep_other_flags(registry, tmp_path):
    props = tmp_path / "gradle.properties"
    props.write_text(
        "org.gradle.jvmargs=-Xmx2048m -Dfile.encoding=UTF-8\norg.gradle.parallel=true\n"
    )
    out = run(registry, "set_gradle_jvmargs", tmp_path, xmx="4g")
    assert out["jvmargs"] == "-Dfile.encoding=UTF-8 -Xmx4g"
    assert props.read_text() == (
        "org.gradle.jvmargs=-Dfile.encoding=UTF-8 -Xmx4g\norg.gradle.parallel=true\n"
    )


def test_gradle_jvmargs_never_shrink_the_heap(registry, tmp_path):
    props = tmp_path / "gradle.properties"
    props.write_text("org.gradle.jvmargs=-Xmx6144m\n")
    assert run(registry, "set_gradle_jvmargs", tmp_path, xmx="4g")["changed"] == []
    assert props.read_text() == "org.gradle.jvmargs=-Xmx6144m\n"
    for bad in ("lots", "100m", "128g", "4g -XX:+Crash"):
        with pytest.raises(ActionError):
            run(registry, "set_gradle_jvmargs", tmp_path, xmx=bad)


# --- advisors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("required", "java"),
    [("17", 17), ("1.8", 8), ("61.0", 17), ("65.0", 21), ("21.0.2", 21), ("11", 11)],
)
def test_suggest_jdk_reads_releases_and_class_file_versions(registry, required, java):
    out = run(registry, "suggest_jdk", required=required)
    assert out["java"] == java
    assert f"eclipse-temurin:{java}" in out["fix"]


def test_suggest_jdk_refuses_what_is_not_a_java_version(registry):
    for bad in ("banana", "52", "99"):
        with pytest.raises(ActionError):
            run(registry, "suggest_jdk", required=bad)


def test_maven_artifact_advice_accepts_gradle_coordinates(registry):
    out = run(
        registry,
        "suggest_maven_artifact_fix",
        artifact="io.confluent:kafka-avro-serializer:7.6.1",
        repository="https://repo.maven.apache.org",
    )
    assert (out["group_id"], out["artifact_id"], out["version"]) == (
        "io.confluent",
        "kafka-avro-serializer",
        "7.6.1",
    )
    assert "--refresh-dependencies" in out["fix"]
