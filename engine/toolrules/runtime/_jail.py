"""The workspace jail: every file operation of the built-in tools goes through here.

A path is first checked as text by the policy (NUL bytes, invisible or look-alike
characters, `~`, absolute paths outside, `..` that climbs out, blocked patterns). Then it
is walked one component at a time from a descriptor of the workspace directory, each
directory opened with O_NOFOLLOW relative to its parent (openat-style). A symlink met on
the way is read and its target resolved against the jail: a target inside continues the
walk from the workspace root, a target outside is refused. Because every step opens
relative to a descriptor the jail already holds, a symlink swapped in between a check
and the open is met by O_NOFOLLOW (and refused or re-resolved), never followed.

Linux and other POSIX systems with `dir_fd` support are the target; elsewhere the jail
refuses to work rather than fall back to path strings.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..calls._policy import Policy, PolicyRefusal

__all__ = ["Entry", "Jail"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
MAX_SYMLINK_HOPS = 40


def _readlink(name: str, dir_fd: int) -> str | None:
    """The symlink's target, or None when it is no longer a symlink."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


def _refuse(rule: str, message: str, **details: object) -> PolicyRefusal:
    return PolicyRefusal("PERMISSION_DENIED", rule, message, **details)


@dataclass(frozen=True, slots=True)
class Entry:
    """A listed directory entry: its path relative to the workspace and whether it is a
    directory."""

    path: str
    is_dir: bool
    size: int | None = None


class Jail:
    """File operations confined to `root` under `policy`'s path rules."""

    def __init__(self, root: str | os.PathLike[str], policy: Policy):
        if not (os.open in os.supports_dir_fd and _O_NOFOLLOW):
            raise OSError("the workspace jail needs openat-style dir_fd support and "
                          "O_NOFOLLOW (Linux, macOS, BSD)")
        self.root = Path(os.path.realpath(root))
        self.policy = policy

    # ------------------------------------------------------------ resolving

    def check(self, text: object, argument: str = "path") -> tuple[str, ...]:
        """The path's components after the text checks and the blocked patterns."""
        return self.policy.check_path(text, str(self.root), argument)

    def check_resolved(self, text: object, argument: str = "path") -> tuple[str, ...]:
        """The text checks, then the path walked inside the jail with its symlinks resolved
        and the blocked patterns applied to where it really leads - for a path another
        program (an MCP server) will open. A path that does not exist yet is fine."""
        parts = self.check(text, argument)
        try:
            fd, _name, canon = self.resolve(parts)
        except (FileNotFoundError, NotADirectoryError):
            return parts
        os.close(fd)
        pattern = self.policy.blocked_by(canon)
        if pattern is not None:
            raise _refuse(f"paths.blocked: {pattern}", f"{argument} {text!r} leads to a path "
                          f"blocked by the pattern {pattern!r}", pattern=pattern)
        return canon

    def _open_root(self) -> int:
        return os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)

    def _link_target(self, where: list[str], link: str, target: str) -> tuple[str, ...]:
        """The jail components a symlink at `where/link` points to, or a refusal."""
        shown = "/".join([*where, link])
        if "\x00" in target:
            raise _refuse("jail.symlink", f"{shown!r} is a broken symlink")
        text = target if target.startswith("/") else "/".join([*where, target])
        try:
            parts = self.policy.path_parts(text, str(self.root), "symlink target")
        except PolicyRefusal:
            raise _refuse("jail.symlink", f"{shown!r} is a symlink pointing outside the "
                          "workspace", path=shown) from None
        pattern = self.policy.blocked_by(parts)
        if pattern is not None:
            raise _refuse(f"paths.blocked: {pattern}", f"{shown!r} is a symlink to a path "
                          f"blocked by the pattern {pattern!r}", path=shown, pattern=pattern)
        return parts

    def resolve(self, parts: tuple[str, ...], *, create_dirs: bool = False
                ) -> tuple[int, str | None, tuple[str, ...]]:
        """Walk `parts` from the root without following symlinks blindly.

        Returns (descriptor of the directory holding the last component, the last
        component or None for the root itself, the canonical components). The caller
        owns the descriptor. The last component need not exist; when it is a symlink it
        is resolved (inside the jail) too."""
        pending = list(parts)
        done: list[str] = []
        hops = 0
        fd = self._open_root()
        try:
            while pending:
                comp = pending.pop(0)
                if not pending:
                    try:
                        st = os.stat(comp, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:
                        return fd, comp, (*done, comp)
                    if not stat.S_ISLNK(st.st_mode):
                        return fd, comp, (*done, comp)
                    target = _readlink(comp, fd)
                    if target is not None:
                        pending = list(self._link_target(done, comp, target))
                else:
                    nfd = self._open_child(fd, comp, done, create_dirs)
                    if nfd >= 0:
                        os.close(fd)
                        fd = nfd
                        done.append(comp)
                        continue
                    target = _readlink(comp, fd) if nfd == -1 else None
                    if target is not None:
                        pending = [*self._link_target(done, comp, target), *pending]
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise _refuse("jail.symlink", "too many levels of symlinks (or a path "
                                  "that keeps changing)")
                if target is None:
                    # The entry changed between two looks at it (a race): look again.
                    pending.insert(0, comp)
                    continue
                # a symlink: start again from the root with its target
                os.close(fd)
                fd = self._open_root()
                done = []
            return fd, None, ()
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def _open_child(fd: int, comp: str, done: list[str], create: bool) -> int:
        """A descriptor of directory `comp` under `fd`; -1 when it is a symlink, -2 when it
        changed while we looked."""
        try:
            return os.open(comp, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such directory",
                                        "/".join([*done, comp])) from None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
            try:
                st = os.stat(comp, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return -2  # gone again: look again
            if stat.S_ISLNK(st.st_mode):
                return -1
            if exc.errno == errno.ELOOP:
                return -2  # was a symlink a moment ago
            raise NotADirectoryError(errno.ENOTDIR, "not a directory",
                                     "/".join([*done, comp])) from None
        # Created concurrently? The open below decides what it is.
        with contextlib.suppress(FileExistsError):
            os.mkdir(comp, 0o777, dir_fd=fd)
        return os.open(comp, _DIR_FLAGS, dir_fd=fd)

    def _final(self, text: object, argument: str, *, create_dirs: bool = False
               ) -> tuple[int, str | None, tuple[str, ...]]:
        parts = self.check(text, argument)
        fd, name, canon = self.resolve(parts, create_dirs=create_dirs)
        pattern = self.policy.blocked_by(canon)
        if pattern is not None:
            os.close(fd)
            raise _refuse(f"paths.blocked: {pattern}", f"{argument} {text!r} leads to a path "
                          f"blocked by the pattern {pattern!r}", pattern=pattern)
        return fd, name, canon

    def open_dir(self, text: object = ".", argument: str = "path") -> tuple[int, tuple[str, ...]]:
        """A descriptor of the directory `text` (the caller closes it) and its components."""
        for _ in range(3):
            fd, name, canon = self._final(text, argument)
            if name is None:
                return fd, canon
            try:
                dfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # swapped for a symlink: resolve again
                    continue
                if exc.errno == errno.ENOTDIR:
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(text)) from None
                raise
            finally:
                os.close(fd)
            return dfd, canon
        raise _refuse("jail.symlink", f"{argument} {text!r} keeps changing into a symlink")

    def realpath_of(self, dfd: int) -> str:
        """The directory a descriptor refers to (for messages and child processes)."""
        link = f"/proc/self/fd/{dfd}"
        return os.readlink(link) if os.path.exists(link) else str(self.root)

    # ------------------------------------------------------------ reading

    def read_bytes(self, text: object, max_bytes: int, argument: str = "path") -> bytes:
        """The contents of a regular file inside the jail (at most `max_bytes`, else a
        refusal naming the limit)."""
        for _ in range(3):
            fd, name, canon = self._final(text, argument)
            try:
                if name is None:
                    raise IsADirectoryError(errno.EISDIR, "is a directory", str(text))
                try:
                    ffd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK,
                                  dir_fd=fd)
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        continue
                    if exc.errno == errno.ENOENT:
                        raise FileNotFoundError(errno.ENOENT, "no such file",
                                                "/".join(canon)) from None
                    raise
            finally:
                os.close(fd)
            try:
                st = os.fstat(ffd)
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "is a directory", "/".join(canon))
                if not stat.S_ISREG(st.st_mode):
                    raise _refuse("jail.file_type", f"{'/'.join(canon)!r} is not a regular file")
                if st.st_size > max_bytes:
                    raise PolicyRefusal(
                        "FILE_TOO_LARGE", "paths.max_read_bytes",
                        f"{'/'.join(canon)!r} is {st.st_size} bytes; the limit is {max_bytes} "
                        "bytes. Use search_files to find the part you need.",
                        size=st.st_size, limit=max_bytes)
                chunks: list[bytes] = []
                remaining = max_bytes + 1
                while remaining > 0:
                    chunk = os.read(ffd, min(remaining, 1 << 20))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    remaining -= len(chunk)
                data = b"".join(chunks)
                if len(data) > max_bytes:  # grew while we read it
                    raise PolicyRefusal("FILE_TOO_LARGE", "paths.max_read_bytes",
                                        f"{'/'.join(canon)!r} is over {max_bytes} bytes",
                                        limit=max_bytes)
                return data
            finally:
                os.close(ffd)
        raise _refuse("jail.symlink", f"{argument} {text!r} keeps changing into a symlink")

    # ------------------------------------------------------------ writing

    def write_bytes(self, text: object, data: bytes, argument: str = "path") -> tuple[str, bool]:
        """Replace (or create) a file atomically: a temporary file in the same directory,
        fsync, rename over the target, fsync the directory. Missing parent directories
        are created inside the jail. Returns (relative path, whether it existed)."""
        fd, name, canon = self._final(text, argument, create_dirs=True)
        try:
            if name is None:
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(text))
            mode = 0o644
            existed = False
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                existed = True
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "is a directory", "/".join(canon))
                if stat.S_ISLNK(st.st_mode):
                    # Swapped in since resolve(): the rename below would replace the link
                    # itself, not its target; refuse rather than guess.
                    raise _refuse("jail.symlink", f"{'/'.join(canon)!r} changed into a symlink")
                if not stat.S_ISREG(st.st_mode):
                    raise _refuse("jail.file_type", f"{'/'.join(canon)!r} is not a regular file")
                mode = stat.S_IMODE(st.st_mode)
            except FileNotFoundError:
                pass
            tmp = f".{name[:80]}.{secrets.token_hex(6)}.tmp"
            tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                          0o600, dir_fd=fd)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        n = os.write(tfd, view)
                        view = view[n:]
                    os.fchmod(tfd, mode)
                    os.fsync(tfd)
                finally:
                    os.close(tfd)
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
                raise
            with contextlib.suppress(OSError):
                os.fsync(fd)  # the rename itself survives a crash
            return "/".join(canon), existed
        finally:
            os.close(fd)

    # ------------------------------------------------------------ listing

    def walk(self, text: object = ".", *, pattern: str = "*", recursive: bool = False,
             files_only: bool = False, links: bool = True,
             argument: str = "path") -> Iterator[Entry]:
        """Entries under a directory, sorted, blocked ones skipped silently. Symlinks are
        shown only when they point inside the jail (and `links`), never descended into."""
        dfd, canon = self.open_dir(text, argument)
        try:
            yield from self._walk(dfd, list(canon), pattern, recursive, files_only, links, 0)
        finally:
            os.close(dfd)

    def _walk(self, dfd: int, where: list[str], pattern: str, recursive: bool,
              files_only: bool, links: bool, depth: int) -> Iterator[Entry]:
        with os.scandir(dfd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            rel = [*where, e.name]
            if self.policy.blocked_by(rel) is not None:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                if not links:
                    continue
                try:
                    link = _readlink(e.name, dfd)
                    if link is None:
                        continue
                    target = self._link_target(where, e.name, link)
                    tfd, tname, _ = self.resolve(target)
                except (PolicyRefusal, OSError):
                    continue  # outside the jail, blocked or broken: not listed
                try:
                    tst = os.stat(tname, dir_fd=tfd, follow_symlinks=False) if tname else None
                except OSError:
                    continue
                finally:
                    os.close(tfd)
                is_dir = tst is None or stat.S_ISDIR(tst.st_mode)
                if (not files_only or not is_dir) and fnmatch.fnmatchcase(e.name, pattern):
                    yield Entry("/".join(rel), is_dir,
                                None if is_dir or tst is None else tst.st_size)
                continue
            if is_dir:
                if not files_only and fnmatch.fnmatchcase(e.name, pattern):
                    yield Entry("/".join(rel), True)
                if recursive and depth + 1 < self.policy.max_depth:
                    try:
                        sub = os.open(e.name, _DIR_FLAGS, dir_fd=dfd)
                    except OSError:
                        continue
                    try:
                        yield from self._walk(sub, rel, pattern, recursive, files_only, links,
                                              depth + 1)
                    finally:
                        os.close(sub)
            elif fnmatch.fnmatchcase(e.name, pattern):
                yield Entry("/".join(rel), False, st.st_size)
