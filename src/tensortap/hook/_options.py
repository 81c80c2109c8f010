"""What every hook takes: where it writes (:data:`OutDir`), and the options after it
(:class:`HookOptions`), defined once for the framework-free hook and every framework's."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeAlias, TypedDict

from tensortap.core._collections import CollectionKeys
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._save_config import SaveConfig
from tensortap.core._vitals import VITALS
from tensortap.storage import Store
from tensortap.writer import WriterOptions

#: Where a hook writes: a directory, a URL (``s3://bucket/prefix``) or a Store.
OutDir: TypeAlias = "str | os.PathLike[str] | Store"

DEFAULT_INCLUDE_COLLECTIONS = (
    CollectionKeys.DEFAULT,
    CollectionKeys.LOSSES,
    CollectionKeys.METRICS,
    CollectionKeys.SCALARS,
    VITALS,  # every step's loss, gradient norm, learning rate... (core._vitals)
)


class HookOptions(TypedDict, total=False):
    """The options every hook takes after ``out_dir``, by keyword only (see
    :class:`~tensortap.hook._hook.Hook` for what each means). A framework's hook takes its own
    arguments and ``**options: Unpack[HookOptions]``, handed to the base hook as they are: the
    options are defined once."""

    save_config: SaveConfig | None
    reduction_config: ReductionConfig | None
    include_collections: Iterable[str] | None
    include_regex: str | Iterable[str] | None
    worker: str | int | None
    num_workers: int | None
    writer_options: WriterOptions | None
    stop_file: str | os.PathLike[str] | None
    export_tensorboard: bool
    tensorboard_dir: str | os.PathLike[str] | None
    save_budget: float | str | None
