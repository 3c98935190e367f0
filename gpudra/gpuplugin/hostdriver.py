"""The host driver's user-space files a GPU container needs, and the CDI edits that bring them in.

Device nodes alone give a container `/dev/nvidia*` but no `libcuda.so`, `libnvidia-ml.so` or
`nvidia-smi`. Like nvidia-container-toolkit's CDI generation (which the NVIDIA DRA driver uses
for its per-claim specs), this finds the driver's files under a *driver root* and turns them
into read-only bind mounts plus, when `nvidia-cdi-hook` is available, the hooks that create the
`libcuda.so` link and refresh the container's ld cache.

`discover_host_driver` is pure over the file tree under `driver_root` (tests point it at a fake
root). Paths it reports are paths *inside* that root ("container paths"); `host_driver_edits`
maps them to host paths under `host_driver_root` — which differs from `driver_root` when the
plugin sees the host's `/` mounted at e.g. `/driver-root`.
"""

from __future__ import annotations

import fnmatch
import os
import re
import struct
from dataclasses import dataclass, field

from gpudra.cdi import ContainerEdits, Hook, Mount

# Library directories in the order nvidia-container-toolkit's locator tries them (after the ldcache).
LIBRARY_DIRS = (
    "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current", "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64", "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current", "/lib/aarch64-linux-gnu/nvidia/current",
    "/usr/lib", "/lib",
)
BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
            "nvidia-cuda-mps-server", "nvidia-imex", "nvidia-imex-ctl")
FIRMWARE_DIRS = ("/lib/firmware/nvidia", "/usr/lib/firmware/nvidia")
IPC_SOCKETS = ("/var/run/nvidia-persistenced/socket", "/var/run/nvidia-fabricmanager/socket")
HOOK_NAME = "nvidia-cdi-hook"
HOOK_LOCATIONS = ("/usr/bin/nvidia-cdi-hook", "/usr/local/bin/nvidia-cdi-hook",
                  "/usr/local/nvidia/toolkit/nvidia-cdi-hook")
LDCACHE = "/etc/ld.so.cache"
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")

_FULL_VERSION = re.compile(r"^\d+\.\d+(\.\d+)*$")
_SONAME = re.compile(r"^lib.+\.so\.\d+$")
_MAX_LINKS = 40


@dataclass
class HostDriverFiles:
    """What was found under the driver root; every path is as seen inside that root."""

    driver_root: str
    version: str | None = None
    libcuda_dir: str | None = None
    libraries: list[str] = field(default_factory=list)  # lib*.so.<version>
    soname_links: list[str] = field(default_factory=list)  # libcuda.so.1 -> libcuda.so.<version>, …
    binaries: list[str] = field(default_factory=list)
    firmware: list[str] = field(default_factory=list)
    ipc_sockets: list[str] = field(default_factory=list)
    hook: str | None = None
    warnings: list[str] = field(default_factory=list)
    # path -> the same file with symlinks resolved inside the root: mount sources must not
    # follow an absolute link (`/var/run -> /run`) out of a driver root that is not the host's /
    resolved: dict[str, str] = field(default_factory=dict)

    def source(self, path: str) -> str:
        return self.resolved.get(path, path)


def resolve_in_root(root: str, path: str) -> str | None:
    """`path` with every symlink followed as if `root` were `/` (absolute link targets stay inside
    it); returns the resolved path inside the root, or None for a symlink loop."""
    pending = [p for p in path.split("/") if p]
    resolved: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        try:
            target = os.readlink(os.path.join(root, *resolved, part))
        except OSError:  # not a symlink, or missing: keep the name
            resolved.append(part)
            continue
        links += 1
        if links > _MAX_LINKS:
            return None
        if target.startswith("/"):
            resolved = []
        pending = [p for p in target.split("/") if p] + pending
    return "/" + "/".join(resolved)


def _host(root: str, path: str) -> str:
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


def _is_file(root: str, path: str) -> bool:
    resolved = resolve_in_root(root, path)
    return resolved is not None and os.path.isfile(_host(root, resolved))


def _listdir(root: str, directory: str) -> list[str]:
    resolved = resolve_in_root(root, directory)
    if resolved is None:
        return []
    try:
        return sorted(os.listdir(_host(root, resolved)))
    except OSError:
        return []


def read_ldcache_dirs(data: bytes, library_prefix: str = "libcuda.so") -> list[str]:
    """Directories of the entries named `library_prefix…` in a glibc ld.so.cache (new format,
    alone or after the old one); [] when the data is not such a cache."""
    magic = b"glibc-ld.so.cache1.1"
    start = data.find(magic)
    if start < 0 or len(data) < start + 48:
        return []
    (count,) = struct.unpack_from("=I", data, start + 20)
    if len(data) < start + 48 + 24 * count:
        return []

    def string_at(offset: int) -> str:
        end = data.find(b"\0", start + offset)
        return data[start + offset:end].decode("utf-8", "replace") if end >= 0 else ""

    dirs: list[str] = []
    for i in range(count):
        _flags, key, value = struct.unpack_from("=iII", data, start + 48 + 24 * i)
        if string_at(key).startswith(library_prefix):
            directory = os.path.dirname(string_at(value))
            if directory.startswith("/") and directory not in dirs:
                dirs.append(directory)
    return dirs


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _library_dirs(root: str) -> list[str]:
    """Candidate directories, ldcache first; one per real directory (`/lib` is often `usr/lib`)."""
    candidates: list[str] = []
    try:
        with open(_host(root, LDCACHE), "rb") as fh:
            candidates.extend(read_ldcache_dirs(fh.read()))
    except OSError:
        pass
    candidates.extend(LIBRARY_DIRS)
    seen: set[str] = set()
    out = []
    for directory in candidates:
        real = resolve_in_root(root, directory)
        if real is None or real in seen or not os.path.isdir(_host(root, real)):
            continue
        seen.add(real)
        out.append(directory)
    return out


def _find_libcuda(root: str, version: str | None, warnings: list[str]) -> tuple[str | None, str | None]:
    """(directory, version) of `libcuda.so.<version>`; with `version` unknown, the newest found."""
    found: list[tuple[str, str]] = []
    for directory in _library_dirs(root):
        for name in _listdir(root, directory):
            suffix = name[len("libcuda.so."):] if name.startswith("libcuda.so.") else ""
            if _FULL_VERSION.match(suffix) and _is_file(root, f"{directory}/{name}"):
                found.append((directory, suffix))
    if not found:
        return None, None
    if version is not None:
        for directory, found_version in found:
            if found_version == version:
                return directory, version
        warnings.append(f"the running driver is {version} but {found[0][0]} holds libcuda.so.{found[0][1]}: "
                        f"mounting the libraries of {found[0][1]} (CUDA will report a version mismatch)")
        return found[0]
    directory, newest = max(found, key=lambda f: _version_key(f[1]))
    if len({v for _, v in found}) > 1:
        warnings.append(f"several libcuda versions under the driver root ({', '.join(sorted({v for _, v in found}))});"
                        f" using {newest} from {directory}")
    return directory, newest


def discover_host_driver(driver_root: str = "/", *, version: str | None = None) -> HostDriverFiles:
    """Find the driver's libraries, binaries, firmware, IPC sockets and `nvidia-cdi-hook` under
    `driver_root`. `version` is the running driver's version (from NVML); without it the version
    is taken from the `libcuda.so.<version>` found. Missing pieces become warnings, never errors."""
    files = HostDriverFiles(driver_root=driver_root, version=version)
    if not os.path.isdir(driver_root):
        files.warnings.append(f"driver root {driver_root} is not a directory: containers get GPU device nodes "
                              "but no driver libraries or binaries")
        return files
    libdir, found_version = _find_libcuda(driver_root, version, files.warnings)
    if libdir is None:
        looked = f"libcuda.so.{version}" if version else "libcuda.so.<version>"
        files.warnings.append(f"no {looked} under driver root {driver_root} (ldcache and {', '.join(LIBRARY_DIRS[:3])}, "
                              "…): containers get GPU device nodes but no CUDA driver libraries; "
                              "set --driver-root to where the NVIDIA driver is installed")
    else:
        files.version = found_version
        files.libcuda_dir = libdir
        pattern = f"*.so.{found_version}"
        real_libraries = set()
        for directory in (libdir, f"{libdir}/vdpau"):
            for name in _listdir(driver_root, directory):
                path = f"{directory}/{name}"
                if fnmatch.fnmatch(name, pattern) and _is_file(driver_root, path):
                    files.libraries.append(path)
                    real_libraries.add(resolve_in_root(driver_root, path))
        real_libdir = resolve_in_root(driver_root, libdir) or libdir
        for name in _listdir(driver_root, libdir):
            path = f"{libdir}/{name}"
            if (_SONAME.match(name) and os.path.islink(_host(driver_root, f"{real_libdir}/{name}"))
                    and resolve_in_root(driver_root, path) in real_libraries):
                files.soname_links.append(path)
    for binary in BINARIES:
        for directory in BINARY_DIRS:
            if _is_file(driver_root, f"{directory}/{binary}"):
                files.binaries.append(f"{directory}/{binary}")
                break
    if not any(b.endswith("/nvidia-smi") for b in files.binaries):
        files.warnings.append(f"no nvidia-smi under driver root {driver_root} ({', '.join(BINARY_DIRS)})")
    if files.version:
        for directory in FIRMWARE_DIRS:
            gsp = [f"{directory}/{files.version}/{n}" for n in _listdir(driver_root, f"{directory}/{files.version}")
                   if fnmatch.fnmatch(n, "gsp*.bin")]
            if gsp:
                files.firmware.extend(gsp)
                break
    for socket in IPC_SOCKETS:
        resolved = resolve_in_root(driver_root, socket)
        if resolved is not None and os.path.exists(_host(driver_root, resolved)):
            files.ipc_sockets.append(socket)
    for location in HOOK_LOCATIONS:
        resolved = resolve_in_root(driver_root, location)
        if resolved is not None and os.access(_host(driver_root, resolved), os.X_OK) \
                and os.path.isfile(_host(driver_root, resolved)):
            files.hook = location
            break
    for path in (files.libraries + files.soname_links + files.binaries + files.firmware + files.ipc_sockets
                 + ([files.hook] if files.hook else [])):
        files.resolved[path] = resolve_in_root(driver_root, path) or path
    return files


def _hook(path: str, *args: str) -> Hook:
    return Hook(hook_name="createContainer", path=path, args=[HOOK_NAME, *args], env=["NVIDIA_CTK_DEBUG=false"])


def host_driver_edits(files: HostDriverFiles, *, host_driver_root: str | None = None,
                      hook_path: str | None = None) -> ContainerEdits:
    """Spec-level CDI edits for `files`: read-only bind mounts (host path under `host_driver_root`,
    default the driver root itself; container path without it) and the `nvidia-cdi-hook` hooks.

    `hook_path` is the hook's path on the host when it lives outside the driver root. Without a
    hook, the host's soname links (`libcuda.so.1`, …) are mounted too, so `dlopen("libcuda.so.1")`
    works even though nothing runs ldconfig in the container."""
    host_root = files.driver_root if host_driver_root is None else host_driver_root
    hook = hook_path or (_host(host_root, files.source(files.hook)) if files.hook else None)
    edits = ContainerEdits()
    if files.libcuda_dir:
        edits.env.append(f"NVIDIA_CTK_LIBCUDA_DIR={files.libcuda_dir}")
    paths = list(files.libraries)
    if hook is None:
        paths += files.soname_links
    paths += files.binaries + files.firmware + files.ipc_sockets
    for path in paths:
        edits.mounts.append(Mount(host_path=_host(host_root, files.source(path)), container_path=path,
                                  options=list(MOUNT_OPTIONS)))
    if hook is not None and files.libcuda_dir:
        edits.hooks.append(_hook(hook, "create-symlinks", "--link",
                                 f"libcuda.so.1::{files.libcuda_dir}/libcuda.so"))
        folders = ["--folder", files.libcuda_dir]
        if any(os.path.dirname(p) == f"{files.libcuda_dir}/vdpau" for p in files.libraries):
            folders += ["--folder", f"{files.libcuda_dir}/vdpau"]
        edits.hooks.append(_hook(hook, "update-ldcache", *folders))
    return edits
