"""System-package advisors for native builds (C/C++ headers, linkers, build tools).

Worker-side and pure: they map what the compiler or linker could not find to
the Debian/Ubuntu package that provides it, and say how to install it. They
never touch the network or the build's machine.
"""

from __future__ import annotations

import re

from theow_workers import action

# Header (exact path as written in the #include) → Debian package.
HEADER_TO_DEB: dict[str, str] = {
    "zlib.h": "zlib1g-dev",
    "ffi.h": "libffi-dev",
    "Python.h": "python3-dev",
    "bzlib.h": "libbz2-dev",
    "lzma.h": "liblzma-dev",
    "lz4.h": "liblz4-dev",
    "zstd.h": "libzstd-dev",
    "snappy.h": "libsnappy-dev",
    "sqlite3.h": "libsqlite3-dev",
    "yaml.h": "libyaml-dev",
    "jpeglib.h": "libjpeg-dev",
    "png.h": "libpng-dev",
    "tiffio.h": "libtiff-dev",
    "gif_lib.h": "libgif-dev",
    "libpq-fe.h": "libpq-dev",
    "pq-fe.h": "libpq-dev",
    "mysql.h": "default-libmysqlclient-dev",
    "gmp.h": "libgmp-dev",
    "mpfr.h": "libmpfr-dev",
    "pcre.h": "libpcre3-dev",
    "pcre2.h": "libpcre2-dev",
    "ncurses.h": "libncurses-dev",
    "curses.h": "libncurses-dev",
    "expat.h": "libexpat1-dev",
    "krb5.h": "libkrb5-dev",
    "ldap.h": "libldap-dev",
    "lber.h": "libldap-dev",
    "libudev.h": "libudev-dev",
    "sodium.h": "libsodium-dev",
    "jansson.h": "libjansson-dev",
    "glib.h": "libglib2.0-dev",
    "magic.h": "libmagic-dev",
    "archive.h": "libarchive-dev",
    "pcap.h": "libpcap-dev",
    "cuda_runtime.h": "nvidia-cuda-toolkit-dev",
}

# Directory prefix of the #include path → Debian package.
HEADER_DIR_TO_DEB: dict[str, str] = {
    "openssl/": "libssl-dev",
    "curl/": "libcurl4-openssl-dev",
    "libxml/": "libxml2-dev",
    "libxslt/": "libxslt1-dev",
    "readline/": "libreadline-dev",
    "uuid/": "uuid-dev",
    "mysql/": "default-libmysqlclient-dev",
    "postgresql/": "libpq-dev",
    "boost/": "libboost-all-dev",
    "gtest/": "libgtest-dev",
    "gmock/": "libgmock-dev",
    "systemd/": "libsystemd-dev",
    "security/": "libpam0g-dev",
    "sys/capability.h": "libcap-dev",
    "sys/acl.h": "libacl1-dev",
    "attr/": "libattr1-dev",
    "X11/": "libx11-dev",
    "GL/": "libgl-dev",
    "SDL2/": "libsdl2-dev",
    "event2/": "libevent-dev",
    "gssapi/": "libkrb5-dev",
    "sasl/": "libsasl2-dev",
    "hiredis/": "libhiredis-dev",
    "fmt/": "libfmt-dev",
    "spdlog/": "libspdlog-dev",
    "nlohmann/": "nlohmann-json3-dev",
    "yaml-cpp/": "libyaml-cpp-dev",
    "google/protobuf/": "libprotobuf-dev",
    "grpcpp/": "libgrpc++-dev",
    "gflags/": "libgflags-dev",
    "glog/": "libgoogle-glog-dev",
    "libusb-1.0/": "libusb-1.0-0-dev",
    "alsa/": "libasound2-dev",
    "freetype2/": "libfreetype-dev",
    "ft2build.h": "libfreetype-dev",
    "gnutls/": "libgnutls28-dev",
    "libavcodec/": "libavcodec-dev",
    "libavformat/": "libavformat-dev",
    "selinux/": "libselinux1-dev",
}

# Linker program → Debian package providing it.
LINKER_TO_DEB: dict[str, str] = {
    "cc": "build-essential",
    "gcc": "gcc",
    "c++": "g++",
    "g++": "g++",
    "clang": "clang",
    "clang++": "clang",
    "lld": "lld",
    "ld.lld": "lld",
    "mold": "mold",
    "musl-gcc": "musl-tools",
    "x86_64-w64-mingw32-gcc": "gcc-mingw-w64-x86-64",
    "i686-w64-mingw32-gcc": "gcc-mingw-w64-i686",
}

_HEADER = re.compile(r"[\w.+/-]+")
_LINKER = re.compile(r"[\w.+-]+")
_CROSS_GCC = re.compile(r"(?P<triple>[a-z0-9_]+-linux-gnu[a-z]*)-(?P<tool>gcc|g\+\+)")


def deb_package_for_header(header: str) -> str | None:
    """The Debian package that ships ``header``, if known."""
    if header in HEADER_TO_DEB:
        return HEADER_TO_DEB[header]
    for prefix, package in HEADER_DIR_TO_DEB.items():
        if header == prefix or (prefix.endswith("/") and header.startswith(prefix)):
            return package
    return HEADER_TO_DEB.get(header.rsplit("/", 1)[-1]) if "/" in header else None


@action("suggest_apt_package", suggests=True)
def suggest_apt_package(header: str) -> dict:
    """Say which Debian/Ubuntu -dev package provides a C/C++ header the compiler could not find."""
    if not _HEADER.fullmatch(header) or ".." in header:
        return {"status": "error", "error": f"not a header path: {header!r}"}
    package = deb_package_for_header(header)
    if package is None:
        return {
            "status": "ok",
            "header": header,
            "package": None,
            "confidence": "unknown",
            "fix": f"apt-file search {header}  (then install the -dev package that ships it)",
        }
    return {
        "status": "ok",
        "header": header,
        "package": package,
        "confidence": "known",
        "fix": f"apt-get install -y {package}",
    }


@action("suggest_linker_install", suggests=True)
def suggest_linker_install(linker: str) -> dict:
    """Say which package provides the linker that rustc (or cargo) could not find."""
    if not _LINKER.fullmatch(linker):
        return {"status": "error", "error": f"not a linker name: {linker!r}"}
    package = LINKER_TO_DEB.get(linker)
    if package is None and (cross := _CROSS_GCC.fullmatch(linker)):
        tool = "g++" if cross.group("tool") == "g++" else "gcc"
        package = f"{tool}-{cross.group('triple').replace('_', '-')}"
    if package is None:
        return {
            "status": "ok",
            "linker": linker,
            "package": None,
            "confidence": "unknown",
            "fix": f"install {linker} in the build image, or point "
            "target.<triple>.linker in .cargo/config.toml at a linker that exists",
        }
    return {
        "status": "ok",
        "linker": linker,
        "package": package,
        "confidence": "known",
        "fix": f"apt-get install -y {package}",
    }


# Build tools and commands → Debian package (None: not an apt package; the advice says why).
TOOL_TO_DEB: dict[str, str | None] = {
    "cc": "build-essential",
    "gcc": "build-essential",
    "c": "build-essential",
    "cmake_c_compiler": "build-essential",
    "c++": "g++",
    "g++": "g++",
    "cxx": "g++",
    "cmake_cxx_compiler": "g++",
    # pip's compiler on an amd64 Debian host: the native gcc, not a cross compiler.
    "x86_64-linux-gnu-gcc": "build-essential",
    "x86_64-linux-gnu-g++": "g++",
    "clang": "clang",
    "clang++": "clang",
    "make": "make",
    "gmake": "make",
    "cmake": "cmake",
    "ninja": "ninja-build",
    "meson": "meson",
    "pkg-config": "pkg-config",
    "pkgconf": "pkgconf",
    "autoconf": "autoconf",
    "autoreconf": "autoconf",
    "automake": "automake",
    "aclocal": "automake",
    "libtool": "libtool",
    "libtoolize": "libtool",
    "m4": "m4",
    "bison": "bison",
    "flex": "flex",
    "patch": "patch",
    "git": "git",
    "curl": "curl",
    "wget": "wget",
    "unzip": "unzip",
    "zip": "zip",
    "xz": "xz-utils",
    "bzip2": "bzip2",
    "zstd": "zstd",
    "rsync": "rsync",
    "jq": "jq",
    "file": "file",
    "gpg": "gnupg",
    "ssh": "openssh-client",
    "scp": "openssh-client",
    "python": "python3",
    "python3": "python3",
    "pip": "python3-pip",
    "pip3": "python3-pip",
    "protoc": "protobuf-compiler",
    "perl": "perl",
    "java": "default-jdk-headless",
    "javac": "default-jdk-headless",
    "mvn": "maven",
    "go": "golang",
    "node": "nodejs",
    "npm": "npm",
    "rustc": None,
    "cargo": None,
    "cl": None,
    "cl.exe": None,
    "msvc": None,
    "microsoft visual c++": None,
    "xcrun": None,
    "xcode": None,
    "vs": None,
}

# Commands that npm puts in node_modules/.bin from devDependencies.
NODE_BINS = frozenset(
    [
        "tsc",
        "vite",
        "jest",
        "eslint",
        "webpack",
        "next",
        "react-scripts",
        "prettier",
        "vitest",
        "tsx",
        "ts-node",
        "nx",
        "turbo",
        "rimraf",
        "cross-env",
        "rollup",
        "esbuild",
        "babel",
        "mocha",
        "nodemon",
        "concurrently",
        "ng",
        "vue-cli-service",
        "nuxt",
        "astro",
        "playwright",
        "cypress",
        "lerna",
        "husky",
        "patch-package",
        "tailwindcss",
        "postcss",
        "sass",
        "storybook",
        "svelte-kit",
    ]
)

_SPECIAL_FIXES = {
    "rustc": "install a Rust toolchain (rustup, or a rust: image); when pip builds a package "
    "that ships wheels (cryptography, orjson, pydantic-core) from source, upgrade pip first: "
    "an old pip cannot use the newer wheels",
    "msvc": 'install Visual Studio Build Tools with the "Desktop development with C++" workload',
    "xcrun": "install the Xcode command line tools: xcode-select --install",
}
_SPECIAL_FIXES.update(
    {
        "cargo": _SPECIAL_FIXES["rustc"],
        "cl": _SPECIAL_FIXES["msvc"],
        "cl.exe": _SPECIAL_FIXES["msvc"],
        "microsoft visual c++": _SPECIAL_FIXES["msvc"],
        "vs": _SPECIAL_FIXES["msvc"],
        "xcode": _SPECIAL_FIXES["xcrun"],
    }
)
_TOOL = re.compile(r"[\w.+ -]{1,64}")


@action("suggest_build_tool_install", suggests=True)
def suggest_build_tool_install(tool: str) -> dict:
    """Say how to get a compiler or command-line tool that the build could not find."""
    if not _TOOL.fullmatch(tool):
        return {"status": "error", "error": f"not a tool name: {tool!r}"}
    key = tool.strip().lower()
    result = {"status": "ok", "tool": tool, "package": None, "confidence": "known"}
    if key in _SPECIAL_FIXES:
        return {**result, "fix": _SPECIAL_FIXES[key]}
    if key in NODE_BINS:
        return {
            **result,
            "fix": f"{tool} comes from the project's devDependencies: install them (npm ci "
            "without --omit=dev, NODE_ENV not 'production') and run it through an npm script "
            "or npx",
        }
    package = TOOL_TO_DEB.get(key)
    if package is None and (cross := _CROSS_GCC.fullmatch(key)):
        tool_name = "g++" if cross.group("tool") == "g++" else "gcc"
        package = f"{tool_name}-{cross.group('triple').replace('_', '-')}"
    if package is None:
        return {
            **result,
            "confidence": "unknown",
            "fix": f"install {tool} in the build image (apt-file search bin/{tool} names the "
            "package)",
        }
    return {**result, "package": package, "fix": f"apt-get install -y {package}"}
