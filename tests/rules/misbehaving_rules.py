"""Custom rules that misbehave on the trial whose directory is named ``victim`` (and judge
nothing elsewhere): they hang, exit the process, kill it, or fail to allocate. For
``run_rules``' isolation tests; each task runs them in a worker process."""

import os
import signal
import threading

from tensortap.rules import Rule


class _OnVictim(Rule):
    def __init__(self, base_trial, victim="victim"):
        super().__init__(base_trial, other_trials=None)
        self.victim = os.path.basename(base_trial.path.rstrip("/")) == victim

    def invoke_at_step(self, step):
        if self.victim and step >= 1:
            self.misbehave()
        return False

    def misbehave(self):
        raise NotImplementedError


class HangingRule(_OnVictim):
    def misbehave(self):
        threading.Event().wait()  # never set: hangs for good


class ExitingRule(_OnVictim):
    def misbehave(self):
        os._exit(3)


class KillingRule(_OnVictim):
    def misbehave(self):
        os.kill(os.getpid(), signal.SIGKILL)


class AllocatingRule(_OnVictim):
    def misbehave(self):
        bytearray(1 << 62)  # 4 EiB: the allocation fails (MemoryError with no message)


def _start_child(base_trial, new_session):
    """Start a process that would run for good, its pid in ``spawned.pid`` beside the trial."""
    import subprocess

    child = subprocess.Popen(["sleep", "1000"], start_new_session=new_session)
    path = os.path.join(os.path.dirname(base_trial.path.rstrip("/")), "spawned.pid")
    with open(path, "a") as f:
        f.write(f"{child.pid}\n")


class _Spawning(_OnVictim):
    new_session = False

    def __init__(self, base_trial, victim="victim"):
        super().__init__(base_trial, victim)
        self.trial = base_trial

    def spawn(self):
        _start_child(self.trial, self.new_session)


class DetachingHangingRule(_OnVictim):
    """Starts a grandchild in a session of its own through a shell that exits at once (as a
    launcher script does: the grandchild is nobody's direct child, in no group of ours), then
    hangs."""

    def __init__(self, base_trial, victim="victim"):
        super().__init__(base_trial, victim)
        self.trial = base_trial

    def misbehave(self):
        import subprocess

        pid = subprocess.run(
            ["sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        path = os.path.join(os.path.dirname(self.trial.path.rstrip("/")), "spawned.pid")
        with open(path, "a") as f:
            f.write(f"{pid}\n")
        threading.Event().wait()


class SpawningHangingRule(_Spawning):
    """Starts a child in its own session, then hangs (its task is stopped at its time limit)."""

    new_session = True

    def misbehave(self):
        self.spawn()
        threading.Event().wait()


class SpawningExitingRule(_Spawning):
    """Starts a child, then ends its own process."""

    def misbehave(self):
        self.spawn()
        os._exit(3)


class SpawningRule(_Spawning):
    """Starts a child in its own session and returns: the child outlives the rule."""

    new_session = True

    def misbehave(self):
        if not getattr(self, "spawned", False):
            self.spawned = True
            self.spawn()
