"""A JSON GET for tests of local servers (the dashboard): the status and the decoded body,
also for an HTTP error's body. (Named so as not to shadow a standard module: the helper
scripts in this folder run with it first on their path.)"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def get_json(url: str, timeout: float = 60) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
