"""System library advisors: a build could not find a native library or an OS package.

Worker-side and pure. ``suggest_system_package`` maps the names build tools
use for a library (pkg-config modules, CMake packages, ``-l`` flags, helper
scripts like pg_config) to the Debian/Ubuntu package that provides it.
``suggest_os_package_name`` explains why apt, dnf or apk could not find a
package and what it is called there.
"""

from __future__ import annotations

import re

from theow_workers import action

# Lower-cased library name (without a "lib" prefix) → Debian package.
LIBRARY_TO_DEB: dict[str, str] = {
    "ssl": "libssl-dev",
    "crypto": "libssl-dev",
    "openssl": "libssl-dev",
    "z": "zlib1g-dev",
    "zlib": "zlib1g-dev",
    "ffi": "libffi-dev",
    "pq": "libpq-dev",
    "postgresql": "libpq-dev",
    "pg_config": "libpq-dev",
    "mysqlclient": "default-libmysqlclient-dev",
    "mariadb": "libmariadb-dev",
    "mysql_config": "default-libmysqlclient-dev",
    "sqlite3": "libsqlite3-dev",
    "curl": "libcurl4-openssl-dev",
    "curl-config": "libcurl4-openssl-dev",
    "xml2": "libxml2-dev",
    "xml-2.0": "libxml2-dev",
    "xml2-config": "libxml2-dev",
    "xslt": "libxslt1-dev",
    "bz2": "libbz2-dev",
    "bzip2": "libbz2-dev",
    "lzma": "liblzma-dev",
    "zstd": "libzstd-dev",
    "uuid": "uuid-dev",
    "udev": "libudev-dev",
    "yaml": "libyaml-dev",
    "yaml-0.1": "libyaml-dev",
    "yaml-cpp": "libyaml-cpp-dev",
    "jpeg": "libjpeg-dev",
    "png": "libpng-dev",
    "png16": "libpng-dev",
    "tiff-4": "libtiff-dev",
    "webp": "libwebp-dev",
    "gmp": "libgmp-dev",
    "mpfr": "libmpfr-dev",
    "pcre2-8": "libpcre2-dev",
    "sodium": "libsodium-dev",
    "event": "libevent-dev",
    "readline": "libreadline-dev",
    "ncurses": "libncurses-dev",
    "ncursesw": "libncurses-dev",
    "tinfo": "libncurses-dev",
    "protobuf": "libprotobuf-dev",
    "grpc++": "libgrpc++-dev",
    "grpc": "libgrpc++-dev",
    "fmt": "libfmt-dev",
    "spdlog": "libspdlog-dev",
    "nlohmann_json": "nlohmann-json3-dev",
    "usb-1.0": "libusb-1.0-0-dev",
    "gtest": "libgtest-dev",
    "gmock": "libgmock-dev",
    "benchmark": "libbenchmark-dev",
    "gflags": "libgflags-dev",
    "glog": "libgoogle-glog-dev",
    "absl": "libabsl-dev",
    "eigen3": "libeigen3-dev",
    "opencv": "libopencv-dev",
    "opencv4": "libopencv-dev",
    "tbb": "libtbb-dev",
    "hdf5": "libhdf5-dev",
    "blas": "libopenblas-dev",
    "openblas": "libopenblas-dev",
    "lapack": "liblapack-dev",
    "boost": "libboost-all-dev",
    "glib-2.0": "libglib2.0-dev",
    "gio-2.0": "libglib2.0-dev",
    "gtk+-3.0": "libgtk-3-dev",
    "gtk-3": "libgtk-3-dev",
    "gtk4": "libgtk-4-dev",
    "dbus-1": "libdbus-1-dev",
    "systemd": "libsystemd-dev",
    "secret-1": "libsecret-1-dev",
    "x11": "libx11-dev",
    "xkbcommon": "libxkbcommon-dev",
    "wayland-client": "libwayland-dev",
    "alsa": "libasound2-dev",
    "asound": "libasound2-dev",
    "pulse": "libpulse-dev",
    "fontconfig": "libfontconfig-dev",
    "freetype2": "libfreetype-dev",
    "freetype": "libfreetype-dev",
    "cairo": "libcairo2-dev",
    "pango": "libpango1.0-dev",
    "archive": "libarchive-dev",
    "git2": "libgit2-dev",
    "seccomp": "libseccomp-dev",
    "cap": "libcap-dev",
    "sasl2": "libsasl2-dev",
    "krb5": "libkrb5-dev",
    "krb5-config": "libkrb5-dev",
    "gssapi_krb5": "libkrb5-dev",
    "gnutls": "libgnutls28-dev",
    "zmq": "libzmq3-dev",
    "hiredis": "libhiredis-dev",
    "magic": "libmagic-dev",
    "gdal": "libgdal-dev",
    "gdal-config": "libgdal-dev",
    "geos": "libgeos-dev",
    "geos-config": "libgeos-dev",
    "proj": "libproj-dev",
    "llvm": "llvm-dev",
    "llvm-config": "llvm-dev",
    "clang": "libclang-dev",
    "gl": "libgl-dev",
    "egl": "libegl-dev",
    "sdl2": "libsdl2-dev",
    "vulkan": "libvulkan-dev",
    "webkit2gtk-4.1": "libwebkit2gtk-4.1-dev",
    "javascriptcoregtk-4.1": "libjavascriptcoregtk-4.1-dev",
    "soup-3.0": "libsoup-3.0-dev",
    "ayatana-appindicator3-0.1": "libayatana-appindicator3-dev",
    "rsvg-2.0": "librsvg2-dev",
    "python3": "python3-dev",
    "python": "python3-dev",
    "pythonlibs": "python3-dev",
    "pkgconfig": "pkg-config",
    "pkg-config": "pkg-config",
    "protoc": "protobuf-compiler",
    "doxygen": "doxygen",
    "threads": "libc6-dev",
    "pthread": "libc6-dev",
    "m": "libc6-dev",
    "dl": "libc6-dev",
    "rt": "libc6-dev",
    "qt5": "qtbase5-dev",
    "qt6": "qt6-base-dev",
    "cuda": "nvidia-cuda-toolkit",
    "cudatoolkit": "nvidia-cuda-toolkit",
    "openmp": "libomp-dev",
    "gomp": "libgomp1",
}

_LIBRARY = re.compile(r"[\w.+-]{1,80}")


def deb_package_for_library(library: str) -> str | None:
    """The Debian package that provides ``library`` as build tools name it, if known."""
    name = library.strip().lower()
    candidates = [name, name.removeprefix("lib"), name.removesuffix("-dev")]
    for candidate in candidates:
        if candidate in LIBRARY_TO_DEB:
            return LIBRARY_TO_DEB[candidate]
    if name.startswith(("boost_", "libboost_")):
        return "libboost-all-dev"
    return None


@action("suggest_system_package", suggests=True)
def suggest_system_package(library: str) -> dict:
    """Say which Debian/Ubuntu package provides a native library the build could not find."""
    if not _LIBRARY.fullmatch(library):
        return {"status": "error", "error": f"not a library name: {library!r}"}
    package = deb_package_for_library(library)
    if package is None:
        guess = f"lib{library.lower().removeprefix('lib')}-dev"
        return {
            "status": "ok",
            "library": library,
            "package": guess,
            "confidence": "guessed",
            "fix": f"apt-get install -y {guess}  (a guess: apt-cache search {library} lists "
            "the real -dev package)",
        }
    fix = f"apt-get install -y {package}"
    if package != "pkg-config":
        fix += " pkg-config"  # most of these are found through pkg-config
    return {
        "status": "ok",
        "library": library,
        "package": package,
        "confidence": "known",
        "fix": fix,
    }


# Debian names that were renamed or dropped, → what to install instead.
DEB_RENAMED: dict[str, str] = {
    "python-dev": "python3-dev",
    "python-pip": "python3-pip",
    "python": "python3",
    "python3-distutils": "python3-setuptools",
    "libmysqlclient-dev": "default-libmysqlclient-dev",
    "libssl1.0-dev": "libssl-dev",
    "libssl1.1": "libssl3",
    "libgl1-mesa-glx": "libgl1",
    "libncurses5-dev": "libncurses-dev",
    "libncursesw5-dev": "libncurses-dev",
    "libpng12-dev": "libpng-dev",
    "libgdk-pixbuf2.0-dev": "libgdk-pixbuf-2.0-dev",
    "libwebkit2gtk-4.0-dev": "libwebkit2gtk-4.1-dev",
    "openjdk-11-jdk": "openjdk-17-jdk",
    "openjdk-8-jdk": "openjdk-17-jdk (or an eclipse-temurin:8 image)",
}

_PACKAGE = re.compile(r"[\w.+:-]{1,100}")


@action("suggest_os_package_name", suggests=True)
def suggest_os_package_name(package: str, manager: str = "apt") -> dict:
    """Say what an OS package the package manager could not find is called, or why it is missing."""
    if not _PACKAGE.fullmatch(package):
        return {"status": "error", "error": f"not a package name: {package!r}"}
    manager = manager.lower()
    if manager not in ("apt", "dnf", "yum", "apk"):
        return {"status": "error", "error": f"unknown package manager: {manager!r}"}
    name = None
    if manager == "apt":
        if package in DEB_RENAMED:
            name = DEB_RENAMED[package]
        elif package.endswith("-devel"):  # Fedora/RHEL spelling
            name = package.removesuffix("-devel") + "-dev"
    elif manager in ("dnf", "yum") and package.endswith("-dev"):
        name = package.removesuffix("-dev") + "-devel"
    elif manager == "apk" and package.endswith("-devel"):
        name = package.removesuffix("-devel") + "-dev"
    index_hint = {
        "apt": "run apt-get update in the same RUN step as apt-get install",
        "dnf": "enable the repository that ships it (EPEL, CRB/PowerTools)",
        "yum": "enable the repository that ships it (EPEL)",
        "apk": "check the Alpine branch (main/community) and apk update",
    }[manager]
    if name is not None:
        fix = f"install {name} instead: {package} is not what this distribution calls it"
    else:
        fix = f"{package} is not in the package index: {index_hint}, and check the name for this release"
    return {"status": "ok", "package": package, "manager": manager, "suggested": name, "fix": fix}
