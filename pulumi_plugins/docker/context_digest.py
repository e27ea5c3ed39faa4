"""The build context's digest, pulumi-docker's `build.contextDigest`: it changes exactly when
something the build can see changes.

    digest = context_digest(".", "gateway/Dockerfile")

As the native Image provider computes it: the Dockerfile's content (always, under the name
"Dockerfile"), then every file of the context not excluded by the ignore file - its path
relative to the context, its Go-formatted mode ("-rw-r--r--") and the SHA-256 of its content
(of its target path for a symlink) - in the order of a lexical walk. The ignore file is
`<Dockerfile>.dockerignore` if present, else `<context>/.dockerignore`, with Docker's pattern
rules (moby/patternmatcher: `*`, `?`, `**`, `[...]`, `!` exceptions, a match on a parent
directory excludes its contents).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path


class ContextError(Exception):
    pass


def read_ignore_file(text: str) -> list[str]:
    """The patterns of a .dockerignore, normalised as moby's ignorefile.ReadAll does."""
    patterns = []
    for number, line in enumerate(text.splitlines()):
        if number == 0:
            line = line.removeprefix("\ufeff")
        if line.startswith("#"):
            continue
        pattern = line.strip()
        if not pattern:
            continue
        invert = pattern.startswith("!")
        if invert:
            pattern = pattern[1:].strip()
        if pattern:
            pattern = os.path.normpath(pattern).replace(os.sep, "/")
            if len(pattern) > 1 and pattern.startswith("/"):
                pattern = pattern[1:]
        patterns.append("!" + pattern if invert else pattern)
    return patterns


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    exclusion: bool


def _compile(pattern: str) -> _Pattern:
    exclusion = pattern.startswith("!")
    if exclusion:
        pattern = pattern[1:]
        if not pattern:
            raise ContextError('illegal exclusion pattern: "!"')
    pattern = os.path.normpath(pattern)
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if pattern[i + 1 : i + 2] == "*":
                i += 1
                if pattern[i + 1 : i + 2] == "/":
                    i += 1
                out += ".*" if i + 1 >= len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "\\":
            i += 1
            out += re.escape(pattern[i : i + 1])
        elif ch == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                raise ContextError(f"syntax error in pattern {pattern!r}")
            body = pattern[i + 1 : end]
            out += "[" + ("^" + body[1:] if body.startswith("^") else body) + "]"
            i = end
        else:
            out += re.escape(ch)
        i += 1
    return _Pattern(re.compile(out + "$"), exclusion)


class Matcher:
    """moby/patternmatcher's MatchesOrParentMatches over a list of ignore patterns."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = [_compile(p) for p in patterns if p.strip()]
        self.has_exclusions = any(p.exclusion for p in self.patterns)

    def excluded(self, rel: str) -> bool:
        matched = False
        parent = os.path.dirname(rel)
        parents = parent.split("/") if parent else []
        for pattern in self.patterns:
            if pattern.exclusion != matched:
                continue
            hit = bool(pattern.regex.match(rel))
            if not hit:
                hit = any(
                    pattern.regex.match("/".join(parents[: n + 1])) for n in range(len(parents))
                )
            if hit:
                matched = not pattern.exclusion
        return matched


def ignore_patterns(context: str, dockerfile: str) -> list[str]:
    for candidate in (Path(dockerfile + ".dockerignore"), Path(context) / ".dockerignore"):
        if candidate.is_file():
            try:
                return read_ignore_file(candidate.read_text())
            except OSError as err:
                raise ContextError(f"reading {str(candidate)!r}: {err}") from None
    return []


def go_mode(mode: int) -> str:
    """Go's os.FileMode.String() of a stat mode."""
    kinds = [
        (stat.S_ISDIR, "d"),
        (stat.S_ISLNK, "L"),
        (stat.S_ISBLK, "D"),
        (stat.S_ISFIFO, "p"),
        (stat.S_ISSOCK, "S"),
    ]
    out = "".join(letter for test, letter in kinds if test(mode))
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
        out = out.replace("D", "") + "D"
    if mode & stat.S_ISUID:
        out += "u"
    if mode & stat.S_ISGID:
        out += "g"
    if stat.S_ISCHR(mode):
        out += "c"
    if mode & stat.S_ISVTX:
        out += "t"
    perms = "".join(
        letter if mode & (1 << (8 - i)) else "-" for i, letter in enumerate("rwxrwxrwx")
    )
    return (out or "-") + perms


class _Accumulator:
    def __init__(self) -> None:
        self.data = bytearray()

    def add(self, path: str, rel: str, mode: int) -> None:
        digest = hashlib.sha256()
        if stat.S_ISLNK(mode):
            target = os.path.realpath(path)
            if not os.path.exists(target):
                raise ContextError(f"could not evaluate symlink at {path}")
            if not os.path.isabs(path):
                target = os.path.relpath(target)
            digest.update(os.path.normpath(target).replace(os.sep, "/").encode())
        elif stat.S_ISREG(mode):
            try:
                with open(path, "rb") as handle:
                    for chunk in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(chunk)
            except OSError as err:
                raise ContextError(f"could not open file {path}: {err}") from None
        self.data += os.path.normpath(rel).replace(os.sep, "/").encode()
        self.data += go_mode(mode).encode()
        self.data += digest.digest()
        self.data += b"\0"


def context_digest(context: str, dockerfile: str) -> str:
    matcher = Matcher(ignore_patterns(context, dockerfile))
    acc = _Accumulator()
    try:
        acc.add(dockerfile, "Dockerfile", stat.S_IFREG)
    except ContextError as err:
        raise ContextError(f"error hashing dockerfile {dockerfile!r}: {err}") from None
    if not os.path.isdir(context):
        raise ContextError(f"unable to hash build context: {context!r} is not a directory")

    def walk(directory: str, rel: str) -> None:
        try:
            names = sorted(os.listdir(directory))
        except OSError as err:
            raise ContextError(f"unable to hash build context: {err}") from None
        for name in names:
            path, child = os.path.join(directory, name), f"{rel}{name}"
            mode = os.lstat(path).st_mode
            excluded = matcher.excluded(child)
            if stat.S_ISDIR(mode):
                # Descend into an excluded directory only if an exception may re-include.
                if not excluded or matcher.has_exclusions:
                    walk(path, child + "/")
            elif not excluded:
                acc.add(path, child, mode)

    walk(context, "")
    return hashlib.sha256(bytes(acc.data)).hexdigest()
