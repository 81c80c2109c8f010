"""The framework-free core: modes, save schedules, reduction specs, collections, the step recorder.

Nothing here imports a training framework or does I/O.
"""
