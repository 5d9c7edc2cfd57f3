"""Rust actions: the toolchain a crate needs.

``set_rust_toolchain`` runs on the build agent: it raises the channel in the
workspace's rust-toolchain.toml, which rustup reads before every cargo
command, so the next run uses a rustc new enough for the dependencies' MSRV
or the manifest's edition. It never lowers a channel and leaves named
channels (stable, nightly) alone.
"""

from __future__ import annotations

import re
from pathlib import Path

from theow_workers import action

# Edition → the first stable rustc that supports it.
EDITION_RUSTC: dict[str, str] = {"2018": "1.31", "2021": "1.56", "2024": "1.85"}

_RUSTC_VERSION = re.compile(r"1\.\d+(?:\.\d+)?")
_CHANNEL_LINE = re.compile(r'(?P<head>\s*channel\s*=\s*)["\'](?P<channel>[^"\']*)["\'](?P<tail>.*)')


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@action("set_rust_toolchain", client_side=True)
def set_rust_toolchain(workspace: str, version: str = "", edition: str = "") -> dict:
    """Raise the workspace's rust-toolchain.toml channel to a rustc that meets an MSRV or edition."""
    if edition:
        if edition not in EDITION_RUSTC:
            return {"status": "error", "error": f"unknown Rust edition: {edition!r}"}
        version = max(version or "1.0", EDITION_RUSTC[edition], key=_key)
    if not _RUSTC_VERSION.fullmatch(version):
        return {"status": "error", "error": f"not a rustc version: {version!r}"}
    root = Path(workspace)
    toml, legacy = root / "rust-toolchain.toml", root / "rust-toolchain"
    result = {
        "status": "ok",
        "changed": [],
        "channel": version,
        "fix": f"build with rustc >= {version} (rustup toolchain install {version})",
    }
    if legacy.is_file() and not toml.is_file():
        current = legacy.read_text(encoding="utf-8").strip()
        if "[toolchain]" not in current:  # the old one-line form: just a channel name
            if _RUSTC_VERSION.fullmatch(current) and _key(current) >= _key(version):
                result["channel"] = current
                return result
            if not _RUSTC_VERSION.fullmatch(current):
                return {**result, "channel": current, "note": f"channel {current!r} left as is"}
            legacy.write_text(f"{version}\n", encoding="utf-8")
            result["changed"] = [str(legacy)]
            return result
        toml = legacy
    if not toml.is_file():
        toml.write_text(f'[toolchain]\nchannel = "{version}"\n', encoding="utf-8")
        result["changed"] = [str(toml)]
        return result
    lines = toml.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        match = _CHANNEL_LINE.fullmatch(line)
        if not match:
            continue
        current = match["channel"]
        if not _RUSTC_VERSION.fullmatch(current):
            return {**result, "channel": current, "note": f"channel {current!r} left as is"}
        if _key(current) >= _key(version):
            result["channel"] = current
            return result
        lines[index] = f'{match["head"]}"{version}"{match["tail"]}'
        break
    else:
        at = next((i + 1 for i, line in enumerate(lines) if line.strip() == "[toolchain]"), None)
        if at is None:
            lines += ["[toolchain]", f'channel = "{version}"']
        else:
            lines.insert(at, f'channel = "{version}"')
    toml.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result["changed"] = [str(toml)]
    return result
