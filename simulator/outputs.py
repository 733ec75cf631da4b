"""Where commands write: output folders and files written whole, and the user's data folder.

An :class:`OutputFolder` (``plan run --out``, ``plan search --out``, ``plan validate ...
--out``) gives these guarantees:

1. **Checked before any work.** :meth:`OutputFolder.open` runs first: an existing file where
   the folder is wanted, a parent that is a file, a folder that cannot be created or written
   is one ``SpecError`` (exit 2) before anything is simulated.
2. **Whole or not at all.** The command writes into a fresh temporary folder beside the
   target (``.<name>.plan-tmp-<pid>-*``); :meth:`OutputFolder.commit` swaps it with the target
   in one rename (``renameat2(RENAME_EXCHANGE)`` where the kernel has it, else two renames)
   and deletes the old one. A failure before the swap removes the temporary folder and
   leaves the old folder as it was.
3. **Nothing stale.** The files a previous run wrote (listed in its ``.plan-output.json``) and
   every name the command writes (``known``: a folder written before manifests existed) are
   dropped, never mixed with the new ones. Anything else in the folder (``cache/`` of a
   search or a validation, the user's own files) is carried into the new folder. The current
   folder (or one holding it), the root and the home folder are refused as output folders.
4. **In-progress marker.** While a command runs, ``IN_PROGRESS`` in the target names its
   pid, host, command and start; the swap removes it, a failure removes it; a killed run
   leaves it (the folder then holds the previous complete output, and for a search the
   cache entries of the killed run, which the next run reuses). A second command on a folder
   whose marker names a live process is refused.

:func:`simulator.output_files.check_output_file` / ``write_file`` do the same for one file
(``plan fit --out``, ``plan ops predict --out``, ``plan models import --out``, ``--markdown``).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import errno
import fnmatch
import json
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from simulator.output_files import check_parents, reason_text, stat_output, write_whole
from simulator.specs.loading import SpecError

MARKER = "IN_PROGRESS"
MANIFEST = ".plan-output.json"
_TMP = ".plan-tmp-"
_OPEN: list[OutputFolder] = []  # opened and neither committed nor aborted (abort_open)


# ------------------------------------------------------------------------------ output folders


def check_output_dir(path: str | Path, option: str = "--out") -> Path:
    """Refuse an output folder that cannot be one (an existing file, a parent that is a
    file, a symlink loop); the resolved path. :meth:`OutputFolder.open` also creates it."""
    p = Path(path)
    st = stat_output(p, option)
    if st is None:
        check_parents(p, option)
        return Path(os.path.realpath(p))
    if not stat.S_ISDIR(st.st_mode):
        raise SpecError(p, option, "exists and is not a folder: give a folder path")
    real = Path(os.path.realpath(p))
    here = Path(os.path.realpath(Path.cwd()))
    if real == Path(real.anchor) or real == Path(os.path.realpath(Path.home())):
        raise SpecError(p, option, "is the root or home folder: give a folder for this output")
    if here.is_relative_to(real):
        raise SpecError(
            p, option, "is the current folder or holds it: the folder is replaced whole, give"
            " another one (e.g. out/)",
        )  # fmt: skip
    return real


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def read_marker(folder: str | Path) -> dict[str, Any] | None:
    """The ``IN_PROGRESS`` marker of ``folder`` (None when there is none)."""
    try:
        data = json.loads((Path(folder) / MARKER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def marker_is_live(marker: dict[str, Any]) -> bool:
    """Whether the process a marker names still runs (another host's: assumed so)."""
    pid = marker.get("pid")
    if not isinstance(pid, int):
        return False
    if marker.get("host") != socket.gethostname():
        return True
    return pid != os.getpid() and pid_alive(pid)


def _libc_exchange() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where it is not available."""
    fn = _libc_exchange()
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


class OutputFolder:
    """An output folder written whole (see the module's guarantees).

    ``with OutputFolder(out, "plan run", known=("requests.csv", ...)) as stage:`` write into
    ``stage``; :attr:`target` is the real folder (a search's ``cache/`` is written there in
    place, and survives the swap). ``known``: names (or ``fnmatch`` patterns) the command
    writes, dropped from a folder written before manifests existed."""

    def __init__(
        self, path: str | Path, command: str, known: Iterable[str] = (), option: str = "--out"
    ) -> None:
        self.path = Path(path)
        self.command = command
        self.known = tuple(known)
        self.option = option
        self.target = self.path
        self.stage: Path | None = None
        self._created = False
        self._marked = False

    # -- lifecycle

    def open(self) -> Path:
        """Check the folder, mark it in progress, make the stage; the stage's path."""
        p = self.path
        self.target = target = check_output_dir(p, self.option)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError(
                p, self.option, f"cannot create its parent: {reason_text(exc)}"
            ) from None
        if target.is_dir():
            marker = read_marker(target)
            if marker and marker_is_live(marker):
                raise SpecError(
                    p, self.option,
                    f"{marker.get('command', 'a plan command')} (pid {marker.get('pid')} on"
                    f" {marker.get('host')}, started {marker.get('started')}) is writing this"
                    f" folder; wait for it, give another folder, or delete {MARKER} if it is"
                    " not running",
                )  # fmt: skip
        else:
            try:
                target.mkdir()
                self._created = True
            except FileExistsError:
                pass
            except OSError as exc:
                raise SpecError(p, self.option, f"cannot create: {reason_text(exc)}") from None
        self._sweep_leftovers()
        try:
            self.stage = Path(
                tempfile.mkdtemp(prefix=f".{target.name}{_TMP}{os.getpid()}-", dir=target.parent)
            )
            # mkdtemp makes it 0700: the folder gets the old one's mode, or the umask's
            os.chmod(self.stage, stat.S_IMODE(os.stat(target).st_mode))
            marker_text = json.dumps(
                {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                 "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")},
            )  # fmt: skip
            write_whole(target / MARKER, marker_text + "\n")
            self._marked = True
        except OSError as exc:
            self.abort()
            raise SpecError(p, self.option, f"cannot write into it: {reason_text(exc)}") from None
        _OPEN.append(self)
        return self.stage

    def _sweep_leftovers(self) -> None:
        """Temporary folders of killed runs beside the target (their pid is gone)."""
        prefix = f".{self.target.name}{_TMP}"
        try:
            siblings = list(self.target.parent.iterdir())
        except OSError:
            return
        for s in siblings:
            if not s.name.startswith(prefix):
                continue
            pid_text = s.name[len(prefix) :].partition("-")[0]
            if pid_text.isdigit() and not pid_alive(int(pid_text)):
                shutil.rmtree(s, ignore_errors=True)

    def _stale_names(self) -> tuple[set[str], tuple[str, ...]]:
        """Names plan wrote into the target (dropped at the swap): those of the previous
        run's manifest, and the command's known names (patterns)."""
        names = {MARKER, MANIFEST}
        try:
            manifest = json.loads((self.target / MANIFEST).read_text())
            names |= {str(n) for n in manifest.get("files", [])}
        except (OSError, ValueError, AttributeError):
            pass
        return names, self.known

    def commit(self) -> None:
        """Swap the stage in; carry over what is not plan's own output; drop the old folder."""
        assert self.stage is not None, "open() first"
        stage, target = self.stage, self.target
        try:
            files = sorted(p.name for p in stage.iterdir())
            write_whole(
                stage / MANIFEST,
                json.dumps({"command": self.command, "files": files}, indent=1) + "\n",
            )
            stale, patterns = self._stale_names()
            for entry in list(target.iterdir()):
                name = entry.name
                if name in stale or any(fnmatch.fnmatch(name, k) for k in patterns):
                    continue
                if (stage / name).exists() or os.path.islink(stage / name):
                    continue  # the new run wrote it
                os.rename(entry, stage / name)  # cache/, the user's own files
            if _exchange(stage, target):
                old = stage
            else:
                old = stage.with_name(stage.name + "-old")
                os.rename(target, old)
                os.rename(stage, target)
        except OSError as exc:
            self.abort()
            raise SpecError(
                self.path, self.option, f"cannot replace the folder: {reason_text(exc)}"
            ) from None
        shutil.rmtree(old, ignore_errors=True)
        self.stage = None
        self._marked = False
        self._forget()

    def _forget(self) -> None:
        if self in _OPEN:
            _OPEN.remove(self)

    def abort(self) -> None:
        """Remove the stage and the marker; the old folder stays as it was."""
        if self.stage is not None:
            # carried entries go back first (a failed swap must not lose a search's cache)
            self._return_carried()
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = None
        if self._marked:
            with contextlib.suppress(OSError):
                (self.target / MARKER).unlink()
            self._marked = False
        if self._created:
            with contextlib.suppress(OSError):
                self.target.rmdir()  # only when empty: nothing was written
        self._forget()

    def _return_carried(self) -> None:
        assert self.stage is not None
        if not self.target.is_dir():
            return
        written = set()
        try:
            written = set(json.loads((self.stage / MANIFEST).read_text()).get("files", []))
        except (OSError, ValueError, AttributeError):
            return  # the manifest is written before anything is carried
        for entry in list(self.stage.iterdir()):
            if entry.name in written or entry.name == MANIFEST:
                continue
            with contextlib.suppress(OSError):
                os.rename(entry, self.target / entry.name)

    def __enter__(self) -> Path:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def final(self, stage_path: str | Path) -> Path:
        """Where a file written into the stage ends up (for "wrote ..." lines)."""
        p = Path(stage_path)
        if self.stage is not None and p.is_relative_to(self.stage):
            return self.path / p.relative_to(self.stage)
        return self.path / p.name


def open_folders() -> list[OutputFolder]:
    """The folders opened and neither committed nor aborted, oldest first."""
    return list(_OPEN)


def abort_open() -> None:
    """Abort every folder opened and not committed (the CLI calls it when a command ends,
    however it ends: a command need not wrap its work in ``with``)."""
    for folder in list(_OPEN):
        folder.abort()
