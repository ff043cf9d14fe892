"""What model-written code may see: its environment and the minimal read-only filesystem tree.

Every sandbox that can build a view of its own (bubblewrap, and the ``unshare`` fallback, see
:mod:`tool_backends.sandbox_mounts`) shows the same :class:`Tree`, so that ordinary code works
alike in each and scores do not depend on the sandbox; the fallback without namespaces confines
each call to the same paths with Landlock (:func:`landlock_paths`). Everything here is computed
from the machine as it is, on demand; :class:`tool_backends.sandbox.Sandbox` keeps the results.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: PATH inside the sandbox: the system's, never the user's (which may name their own tools).
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
#: The system's directories every program needs (linked as they are on the host when links).
SYSTEM_DIRECTORIES = ("/usr", "/etc")
SYSTEM_LINKS = ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32")
#: Top-level names of this project's own packages: an installed copy holds the bundled sample
#: (``pytest_gta/_sample``, reference answers included) and nothing a call needs.
OWN_PACKAGES = ("pytest_gta", "tool_backends")


def sandbox_environment(scratch: str) -> dict[str, str]:
    """The whole environment of model-written code: nothing the user's shell holds.

    API keys, tokens, proxies with credentials and the user's PATH never reach a call.
    """
    return {
        "PATH": SANDBOX_PATH,
        "LANG": "C.UTF-8",
        "HOME": scratch,
        "MPLCONFIGDIR": os.path.join(scratch, ".mpl"),
    }


def python_paths() -> tuple[str, ...]:
    """What the worker's interpreter needs, and nothing more: the files and directories shown.

    The interpreter's own directory, ``pyvenv.cfg`` (without it a virtualenv's Python forgets
    its packages), the shared ``libpython`` it links, and the import path of ``python -I``
    itself (the standard library, ``lib-dynload``, site-packages; a virtualenv anywhere,
    ``/tmp`` included, and paths its ``.pth`` files add under a prefix or a ``site-packages``).
    Not the whole prefix and not a checkout on ``sys.path`` (an editable install): the worker
    imports nothing from it, and model code has no business reading it. It asks a ``python
    -I`` of its own, so a caller keeps the answer (:class:`tool_backends.sandbox.Sandbox` does).
    """
    executable = os.path.abspath(sys.executable)
    wanted = [os.path.dirname(os.path.realpath(executable)), os.path.dirname(executable)]
    for home in (sys.prefix, os.path.dirname(os.path.dirname(executable))):
        wanted.append(os.path.join(home, "pyvenv.cfg"))
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and sysconfig.get_config_var("Py_ENABLE_SHARED"):
        for name in ("LDLIBRARY", "INSTSONAME"):
            library = sysconfig.get_config_var(name)
            if library:
                wanted.append(os.path.join(libdir, library))
    try:
        out = subprocess.run(
            [sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
            capture_output=True,
            timeout=30,
            check=True,
            env=sandbox_environment(tempfile.gettempdir()),
        ).stdout
        entries = [p for p in json.loads(out) if isinstance(p, str) and p]
    except (OSError, ValueError, subprocess.SubprocessError):
        entries = list(site.getsitepackages())
    prefixes = tuple(os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix) if p)
    for entry in entries:
        real = os.path.realpath(entry)
        inside = (real + os.sep).startswith(prefixes)
        if inside or "site-packages" in real or "dist-packages" in real:
            wanted.append(entry)
    found: list[str] = []
    for path in wanted:
        for candidate in dict.fromkeys((os.path.realpath(path), os.path.abspath(path))):
            if os.path.exists(candidate) and candidate not in found:
                found.append(candidate)
    return tuple(found)


def checkout() -> str | None:
    """This project's checkout, when it runs from one (an editable install)."""
    root = Path(__file__).resolve().parents[1]
    return str(root) if (root / "pyproject.toml").is_file() else None


def datasets_under(directory: str) -> list[str]:
    """Every directory under ``directory`` that holds a GTA ``dataset.json`` (and the project).

    Walked once per tree (site-packages: about 0.2 s for 100,000 files).
    """
    found = []
    for here, subdirectories, files in os.walk(directory):
        if "dataset.json" in files:
            found.append(here)
            subdirectories[:] = []
            continue
        if here == directory or here.endswith(("site-packages", "dist-packages")):
            found += [os.path.join(here, n) for n in subdirectories if n in OWN_PACKAGES]
            subdirectories[:] = [n for n in subdirectories if n not in OWN_PACKAGES]
    return found


@dataclass(frozen=True)
class Tree:
    """The filesystem model-written code sees, in every sandbox that can build one.

    Only the system directories and what the interpreter needs, read-only; no dataset (the
    run's, the bundled sample's installed copy, any other under those paths), no checkout, no
    home directory. Each directory on the way to a bound path is made ``0755``, so a call's uid
    reaches a Python that lives under a ``0700`` home.
    """

    #: ``(path on the host, path inside)``, parents before children; directories and files.
    binds: tuple[tuple[str, str], ...]
    #: ``(link text, path inside)``: ``/bin`` and friends where the host links them.
    links: tuple[tuple[str, str], ...]
    #: Directories made on the way to the binds, parents first.
    directories: tuple[str, ...]
    #: Paths inside the binds covered with an empty read-only tmpfs.
    hidden: tuple[str, ...]


def build_tree(
    python: tuple[str, ...], hidden: Iterable[str] = (), project: str | None = None
) -> Tree:
    """The :class:`Tree` that shows the system and ``python`` (see :func:`python_paths`).

    Args:
        python: The interpreter's paths to show.
        hidden: Paths to hide besides the datasets found under ``python`` (the run's dataset,
            wherever it lies).
        project: This project's checkout, hidden where a shown path holds it.
    """
    links = []
    wanted = list(SYSTEM_DIRECTORIES)
    for name in SYSTEM_LINKS:
        if os.path.islink(name):
            links.append((os.readlink(name), name))
        elif os.path.isdir(name):
            wanted.append(name)
    binds: list[tuple[str, str]] = []
    for path in [*wanted, *python]:
        real = os.path.realpath(path)
        if not os.path.exists(real):
            continue
        for target in dict.fromkeys((real, os.path.abspath(path))):
            if target not in (b[1] for b in binds):
                binds.append((real, target))
    parents: list[str] = []
    for _, target in binds:
        for parent in reversed(Path(target).parents):
            name = str(parent)
            if name != "/" and name not in parents:
                parents.append(name)
    bound = [t for _, t in binds]
    candidates = [h for p in python if os.path.isdir(p) for h in datasets_under(p)]
    candidates += [*hidden, *([project] if project else [])]
    covered = []
    for path in dict.fromkeys(candidates):
        inside = any(path.startswith(t.rstrip("/") + "/") for t in bound)
        # A shown path inside it (a shipped example agent inside the installed package) is
        # bound again after its tmpfs (``sandbox_mounts.split_by_hidden``): it alone shows.
        if inside and path not in bound and os.path.isdir(path):
            covered.append(path)
    # A hidden path inside another is covered with it: mounting on it would need a mount point
    # in the outer one's empty, read-only tmpfs (the bundled sample inside an installed package).
    covered = [p for p in covered if not _beneath(p, [c for c in covered if c != p])]
    return Tree(
        tuple(sorted(binds, key=lambda b: b[1].count("/"))),
        tuple(links),
        # Parents inside a bound directory (a virtualenv shown whole beside its site-packages)
        # exist there once it is bound: made beforehand, they would need their own parents.
        tuple(
            sorted(
                (p for p in parents if p not in bound and not _beneath(p, bound)),
                key=lambda p: p.count("/"),
            )
        ),
        tuple(sorted(covered)),
    )


def _beneath(path: str, bound: list[str]) -> bool:
    return any(path.startswith(b.rstrip("/") + "/") for b in bound)


def landlock_paths(tree: Tree) -> tuple[str, ...]:
    """The :class:`Tree`'s paths on the host, split around what it hides (for Landlock).

    Where no mount namespace can show the tree, the worker confines each call to these paths
    with Landlock (``sandbox_worker.landlock``). Landlock allows whole hierarchies and cannot
    take one back, so a bound directory that holds a hidden one is allowed entry by entry, down
    to the hidden one, which is left out.
    """
    hidden = {os.path.realpath(h) for h in tree.hidden}
    found: list[str] = []

    def allow(path: str) -> None:
        if path in hidden or path in found:
            return
        inside = [h for h in hidden if h.startswith(path.rstrip("/") + "/")]
        if not inside or not os.path.isdir(path) or os.path.islink(path):
            found.append(path)
            return
        for entry in sorted(os.listdir(path)):
            allow(os.path.join(path, entry))

    for real, _ in tree.binds:
        allow(real)
    return tuple(found)
