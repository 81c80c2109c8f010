"""A process tree that ends with the process that started it, however that one ends.

A launcher (``torchrun``, ``accelerate launch``, ``bash train.sh``) starts the trainer as its
child; a parent-death signal reaches the launcher only, and once the launcher is gone its
children are re-parented to pid 1 and run on. So a job runs each command under a *keeper*:

    python -I _process_tree.py PARENT_PID COMMAND...

The keeper (this file run as a script: the standard library only, nothing of tensortap, so it
starts in milliseconds) becomes a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): every
process of the command's tree that loses its parent is re-parented to the keeper, not to pid 1,
so the whole tree stays below it however deep and whatever sessions or groups it makes. It
leads a process group of its own, starts the command in it, and then waits:

- the supervisor (``PARENT_PID``) dies, however it dies (SIGKILL included: the keeper holds a
  parent-death signal and also checks its parent twice a second): the keeper freezes the whole
  tree (SIGSTOP, so that nothing forks meanwhile), kills it (SIGKILL) and exits;
- SIGTERM or SIGINT: forwarded to every process of the tree (as a terminal does to its
  foreground group), so a shell's trainer gets it too;
- the command ends: what it left running gets SIGTERM, then SIGKILL ``LEFTOVER_GRACE`` seconds
  later, and the keeper ends as the command ended (its exit code, or killed by its signal).

The supervisor kills the tree with :func:`end_tree` (the keeper, all below it, and the keeper's
process group). Elsewhere than Linux there is no subreaper and no ``/proc``: the keeper still
notices its parent's death (polling) and kills its process group, and signals go to the group;
a process that made a session or group of its own is missed there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

#: Seconds the processes a command left running get between SIGTERM and SIGKILL.
LEFTOVER_GRACE = 10.0
#: Seconds between two checks that the keeper's parent lives (a parent-death signal is faster).
PARENT_POLL = 0.5
#: Longest an ending tree may take to be frozen and killed before :func:`end_tree` gives up.
END_DEADLINE = 10.0

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
LINUX = sys.platform.startswith("linux")


def _prctl() -> Callable[..., int] | None:
    if not LINUX:
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


def _parents() -> dict[int, int]:
    """Every live process and its parent, read from ``/proc`` (empty where there is none).
    Zombies are left out: they are dead, only not yet reaped."""
    found: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # it ended meanwhile
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[0] not in (b"Z", b"X"):
            found[int(entry)] = int(fields[1])
    return found


def descendants(root: int) -> list[int]:
    """The live processes below ``root`` (not ``root``), parents before their children;
    empty where ``/proc`` cannot be read."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def _signal(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def end_tree(
    root: int,
    *,
    include_root: bool = True,
    group: int | None = None,
    reap: Callable[[], object] | None = None,
) -> None:
    """Kill ``root``'s whole tree (and ``root`` with ``include_root``): freeze it first
    (SIGSTOP, again until no new process appears, so that nothing forks while it is killed),
    then SIGKILL everything frozen; repeated until nothing is left below ``root`` or
    :data:`END_DEADLINE` passed. ``group``: a process group killed too (all there is where
    ``/proc`` cannot be read). ``reap`` collects the dead children of the calling process (a
    keeper's), so that they do not look alive."""
    end = time.monotonic() + END_DEADLINE
    if include_root:
        _signal([root], signal.SIGSTOP)
    while True:
        frozen: list[int] = []
        while True:  # a process may fork until it is stopped: look again until none is new
            new = [p for p in descendants(root) if p not in frozen]
            if not new or time.monotonic() > end:
                break
            _signal(new, signal.SIGSTOP)
            frozen += new
        _signal(frozen, signal.SIGKILL)
        if group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        if reap is not None:
            reap()
        if not descendants(root) or time.monotonic() > end:
            break
    if include_root:
        _signal([root], signal.SIGKILL)


def hold_own_tree() -> None:
    """Make this process the root of its own tree: its own process group, and (Linux) a child
    subreaper, so that what it starts stays below it (:func:`descendants`) until it ends."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_children(reaped: Callable[[int, int], None] | None = None) -> None:
    """Collect every dead child of this process (a subreaper's orphans among them), telling
    ``reaped`` each one's pid and wait status."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if reaped is not None:
            reaped(pid, status)


# -- the keeper (run as a script) --


class _Keeper:
    def __init__(self, parent: int, command: list[str]) -> None:
        self.parent = parent
        self.command = command
        self.pid = os.getpid()
        self.child: int | None = None
        self.status: int | None = None  # the command's wait status, once it ended
        self.leftovers_at: float | None = None  # when the command's leftovers got SIGTERM
        self.signals: list[int] = []

    def reap(self) -> None:
        """Collect every dead child (as a subreaper, orphans of the tree are ours)."""
        reap_children(self._reaped)

    def _reaped(self, pid: int, status: int) -> None:
        if pid == self.child:
            self.status = status

    def end(self) -> None:
        """Kill the whole tree (elsewhere than Linux: the keeper's group, the keeper too)."""
        end_tree(self.pid, include_root=False, reap=self.reap)
        if not LINUX:
            os.killpg(os.getpgrp(), signal.SIGKILL)

    def forward(self, signum: int) -> None:
        """Send ``signum`` once to every process of the tree (elsewhere than Linux: to the
        keeper's group, the keeper ignoring it meanwhile)."""
        if LINUX:
            _signal(descendants(self.pid), signum)
            return
        previous = signal.signal(signum, signal.SIG_IGN)
        try:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgrp(), signum)
        finally:
            signal.signal(signum, previous)

    def parent_gone(self) -> bool:
        return os.getppid() != self.parent

    def run(self) -> int:
        prctl = _prctl()
        if prctl is not None:
            prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)  # drained after each wait, also when nothing came
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        if self.parent_gone():  # the supervisor died before the parent-death signal was set
            return 1
        with contextlib.suppress(OSError):  # the group the command runs in, and ends with
            os.setpgid(0, 0)
        try:
            proc = subprocess.Popen(self.command, preexec_fn=_dies_with(self.pid))
        except (OSError, ValueError) as exc:
            print(f"cannot start {self.command[0]}: {exc}", file=sys.stderr, flush=True)
            return 127
        self.child = proc.pid
        proc.returncode = 0  # reaped here (waitpid(-1)), never by the Popen object
        while True:
            self.reap()
            if self.parent_gone():
                self.end()
                return 1
            for got in self.signals:
                if got in (signal.SIGTERM, signal.SIGINT):
                    self.forward(got)
            self.signals.clear()
            if self.status is not None:
                if not descendants(self.pid):
                    return self._exit_as_command()
                now = time.monotonic()
                if self.leftovers_at is None:
                    self.leftovers_at = now
                    self.forward(signal.SIGTERM)
                elif now - self.leftovers_at >= LEFTOVER_GRACE:
                    self.end()
            with contextlib.suppress(InterruptedError):
                select.select([wake_r], [], [], PARENT_POLL)
            with contextlib.suppress(BlockingIOError, InterruptedError):
                os.read(wake_r, 512)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)

    def _exit_as_command(self) -> int:
        status = self.status if self.status is not None else 0
        if os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
            with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have none
                signal.signal(signum, signal.SIG_DFL)
            os.kill(self.pid, signum)  # end as the command ended: killed by its signal
            return 128 + signum  # a signal that does not end a process
        return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def _dies_with(keeper: int) -> Callable[[], None] | None:
    """The command's ``preexec_fn``: killed with the keeper (Linux; elsewhere None)."""
    prctl = _prctl()
    if prctl is None:
        return None

    def arm() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != keeper:
                os.kill(os.getpid(), signal.SIGKILL)

    return arm


def keeper_command(command: Sequence[str], parent: int | None = None) -> list[str]:
    """``command`` run under a keeper whose parent is ``parent`` (default: this process)."""
    return [
        sys.executable,
        "-I",  # stdlib only: no site, no PYTHON* variables, no script directory on the path
        os.path.abspath(__file__),
        str(os.getpid() if parent is None else parent),
        *command,
    ]


# -- a keeper one step removed from its parent --
#
# Some parents have their direct children killed when they die: Ray SIGKILLs a worker's
# children when it kills the worker (a cancelled task), and a keeper killed so cannot end its
# tree. A guard stands between: the parent's child, it dies with the parent (a parent-death
# signal, and a check that the parent is still the one named) and holds the keeper, whose
# parent it is; whether the guard dies of that signal or is killed, the keeper sees its
# parent gone and ends the whole tree.


def guarded_keeper_command(command: Sequence[str], parent: int | None = None) -> list[str]:
    """``command`` run under a keeper under a guard whose parent is ``parent`` (default: this
    process); exits as the command ends."""
    return [
        sys.executable,
        "-I",
        os.path.abspath(__file__),
        "--guard",
        str(os.getpid() if parent is None else parent),
        *command,
    ]


def _guard(parent: int, command: list[str]) -> int:
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the parent-death signal was set
        return 1
    keeper = subprocess.Popen(
        [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), *command]
    )
    while True:
        try:
            code = keeper.wait(PARENT_POLL)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:  # elsewhere than Linux: no parent-death signal
                keeper.terminate()  # the keeper ends its tree (it also sees us gone)
                return 1
    if code < 0:  # end as the keeper ended: killed by its signal
        with contextlib.suppress(OSError, ValueError):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def main(argv: Sequence[str]) -> int:
    if len(argv) >= 3 and argv[0] == "--guard" and argv[1].isdigit():
        return _guard(int(argv[1]), list(argv[2:]))
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: python -I _process_tree.py [--guard] PARENT_PID COMMAND...", file=sys.stderr)
        return 2
    return _Keeper(int(argv[0]), list(argv[1:])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
