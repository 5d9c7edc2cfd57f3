"""System advisors: build tools, native libraries and OS package names."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.core.actions import ActionError, ActionRegistry, call_action, load_actions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry() -> ActionRegistry:
    return load_actions(ROOT / "actions")


def run(registry, name, **params):
    return call_action(registry.get(name), params)


@pytest.mark.parametrize(
    ("tool", "package"),
    [
        ("gcc", "build-essential"),
        ("x86_64-linux-gnu-gcc", "build-essential"),
        ("CXX", "g++"),
        ("C++", "g++"),
        ("make", "make"),
        ("Python", "python3"),
        ("jq", "jq"),
        ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"),
    ],
)
def test_build_tools_map_to_debian_packages(registry, tool, package):
    out = run(registry, "suggest_build_tool_install", tool=tool)
    assert (out["package"], out["fix"]) == (package, f"apt-get install -y {package}")


@pytest.mark.parametrize(
    ("tool", "words"),
    [
        ("tsc", "devDependencies"),
        ("vite", "devDependencies"),
        ("Microsoft Visual C++", "Visual Studio Build Tools"),
        ("VS", "Visual Studio Build Tools"),
        ("Xcode", "xcode-select --install"),
        ("rustc", "upgrade pip"),
    ],
)
def test_tools_that_are_not_apt_packages_get_their_own_advice(registry, tool, words):
    out = run(registry, "suggest_build_tool_install", tool=tool)
    assert out["package"] is None
    assert words in out["fix"]


def test_unknown_tools_are_said_to_be_unknown(registry):
    out = run(registry, "suggest_build_tool_install", tool="frobnicate")
    assert (out["package"], out["confidence"]) == (None, "unknown")
    with pytest.raises(ActionError):
        run(registry, "suggest_build_tool_install", tool="jq; rm -rf /")


@pytest.mark.parametrize(
    ("library", "package"),
    [
        ("OpenSSL", "libssl-dev"),
        ("ssl", "libssl-dev"),
        ("libffi", "libffi-dev"),
        ("pg_config", "libpq-dev"),
        ("MYSQLCLIENT", "default-libmysqlclient-dev"),
        ("Boost", "libboost-all-dev"),
        ("boost_system", "libboost-all-dev"),
        ("glib-2.0", "libglib2.0-dev"),
        ("libusb-1.0", "libusb-1.0-0-dev"),
        ("protoc", "protobuf-compiler"),
        ("pkg-config", "pkg-config"),
        ("jpeg", "libjpeg-dev"),
    ],
)
def test_libraries_map_from_every_name_build_tools_use(registry, library, package):
    out = run(registry, "suggest_system_package", library=library)
    assert (out["package"], out["confidence"]) == (package, "known")


def test_unknown_libraries_get_a_labelled_guess(registry):
    out = run(registry, "suggest_system_package", library="libfrob")
    assert (out["package"], out["confidence"]) == ("libfrob-dev", "guessed")
    with pytest.raises(ActionError):
        run(registry, "suggest_system_package", library="ssl && curl evil")


@pytest.mark.parametrize(
    ("package", "manager", "suggested"),
    [
        ("libcurl4-openssl-devel", "apt", "libcurl4-openssl-dev"),
        ("libgl1-mesa-glx", "apt", "libgl1"),
        ("python3-distutils", "apt", "python3-setuptools"),
        ("libcurl-dev", "dnf", "libcurl-devel"),
        ("libffi-devel", "apk", "libffi-dev"),
        ("jq", "dnf", None),
    ],
)
def test_os_package_names_are_translated_between_distributions(
    registry, package, manager, suggested
):
    out = run(registry, "suggest_os_package_name", package=package, manager=manager)
    assert out["suggested"] == suggested
    if suggested is None:
        assert "EPEL" in out["fix"]
    with pytest.raises(ActionError):
        run(registry, "suggest_os_package_name", package=package, manager="brew")
