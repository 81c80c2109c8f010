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
