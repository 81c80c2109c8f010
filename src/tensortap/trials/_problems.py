"""What went wrong while a trial was saved, per worker, as :meth:`Trial.problems` lists it after
the parts of the trial that could not be read: the steps a worker dropped or lost, the errors
its writer and its hook counted, and the damaged parts of a converted smdebug trial."""

from __future__ import annotations

from tensortap.trials._index import TrialIndex


def worker_problems(index: TrialIndex, workers: list[str]) -> list[str]:
    """The problems of ``workers`` (in the order given) in the trial ``index`` holds."""
    out: list[str] = []
    expected = index.expected_workers()
    if workers and len(index.workers) < expected:
        # their info says more workers write this trial: the others have not started yet (a
        # live trial), never wrote, or their folders were deleted or replaced by a symlink
        # (not followed); said either way, or a lost worker's rows would go without a word
        out.append(
            f"workers/: {expected} workers were expected (their worker info says so), "
            f"{len(index.workers)} wrote here ({', '.join(workers[:8])}): the others have not "
            "started yet, or their folders are missing (deleted, or a symlink, which is not "
            "followed), and so are their steps"
        )
    for name in workers:
        state = index.workers[name]
        converted = (state.end or {}).get("problems")  # an smdebug trial's damaged parts
        if isinstance(converted, list):
            out.extend(f"unreadable (smdebug) {text}" for text in converted)
        if state.dropped:
            out.append(f"{name}: {len(state.dropped)} steps dropped (write queue full)")
        status = (state.end or {}).get("status") or {}
        if status.get("errors"):
            out.append(
                f"{name}: {status['errors']} writer errors, {status.get('steps_lost', 0)} "
                f"steps lost; last: {status.get('last_error')}"
            )
        hook_errors = max(state.hook_errors, int((state.end or {}).get("internal_errors", 0)))
        if hook_errors:
            last = (state.end or {}).get("last_internal_error") or state.last_hook_error
            out.append(f"{name}: {hook_errors} internal hook errors; last: {last}")
    return out
