"""A job and its trial whose every field carries script: tensor names, the run's name,
summary.json's fields, rule messages, the command, the log. Seven kinds of payload, each of
which sets ``window.__xss`` (or makes a link) if a page lets it through; the dashboard's and
the static report's tests open every page over them in headless Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import tensortap as tt
from tensortap.jobs._record import write_json

#: kind -> payload (none holds "/" where it names a directory)
PAYLOADS = {
    "script": "<script>window.__xss='script'</script>",
    "img": "<img src=x onerror=window.__xss='img'>",
    "break-out": "\"><svg onload=window.__xss='break-out'>",
    "javascript-url": "javascript:window.__xss='javascript-url'",
    "plotly-link": '<a href="https://evil.example/">link</a><b>bold</b>',
    "quote": "' onmouseover='window.__xss=`quote`' autofocus onfocus='window.__xss=`quote`' x='",
    "title": "</title><script>window.__xss='title'</script>",
}

#: the run's (the job directory's) name
JOB_NAME = "job<img src=x onerror=window.__xss='run-name'>\"'"


def write_hostile_job(root: Path) -> Path:
    """A job directory under ``root`` (a finished job's files, as shared by someone else):
    its trial's losses, gradients and ReLU outputs named by the payloads."""
    job = root / JOB_NAME
    names = {
        kind: (f"loss {p}", f"gradient/{p}", f"relu_output_{p}") for kind, p in PAYLOADS.items()
    }
    hook = tt.Hook(
        job / "trial",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "gradients", "relu_activations"],
    )
    for step in range(4):
        for i, (loss, gradient, relu) in enumerate(names.values()):
            hook.save_tensor(loss, np.float32(1.0 / (step + 1) + i), collections="losses")
            hook.save_tensor(gradient, np.full(4, 0.5 + i), collections="gradients")
            hook.save_tensor(relu, np.ones((2, 4), np.float32), collections="relu_activations")
        hook.next_step()
    hook.close()
    rules: list[dict[str, Any]] = []
    for kind, p in PAYLOADS.items():
        rules.append(
            {
                "RuleConfigurationName": f"Rule {p}",
                "RuleEvaluationStatus": "IssuesFound",
                "StatusDetails": p,
                "severity": "problem",
                "gravest_step": 1,
                "gravest_message": f"{kind}: {p}",
                "message": p,
                "evaluated": p,
                "triggered": p,
                "skipped": p,
            }
        )
    rules.append(  # a step that is no number
        {
            "RuleConfigurationName": "Stepless",
            "RuleEvaluationStatus": PAYLOADS["break-out"],
            "gravest_step": PAYLOADS["img"],
            "evaluated": 3,
            "triggered": 1,
            "skipped": 0,
        }
    )
    write_json(job / "job.json", {"command": list(PAYLOADS.values()), "rules": []})
    write_json(
        job / "summary.json",
        {
            "status": PAYLOADS["title"],
            "training": {"status": PAYLOADS["img"], "exit_code": PAYLOADS["quote"]},
            "rules": rules,
        },
    )
    (job / "logs").mkdir(exist_ok=True)
    (job / "logs" / "training.log").write_text("\n".join(PAYLOADS.values()) + "\n")
    (job / "events.jsonl").write_text(
        "".join(
            f'{{"time": 1, "event": "rule_fired", "rule": {_j(p)}, "step": {_j(p)}, '
            f'"message": {_j(p)}}}\n'
            for p in PAYLOADS.values()
        )
    )
    return job


def _j(value: str) -> str:
    import json

    return json.dumps(value)


#: what a page shows when none of the payloads became markup or script
CHECK = """
const bad = [];
if (window.__xss !== undefined) bad.push('script ran: ' + window.__xss);
for (const e of document.querySelectorAll('*')) {
  for (const a of e.getAttributeNames()) {
    if (/^on/i.test(a)) bad.push(`${e.tagName} has ${a}`);
  }
  const href = e.getAttribute('href') || e.getAttribute('xlink:href') || '';
  if (/javascript:|evil\\.example/i.test(href)) bad.push(`${e.tagName} links to ${href}`);
  if (e.tagName === 'IMG') bad.push('markup IMG');
}
return bad;
"""


def assert_no_payload_ran(browser: Any) -> None:
    """Nothing the payloads carry ran or became markup, and no console error (CSP included)."""
    page = browser.driver.current_url
    bad = browser.driver.execute_script(CHECK)
    assert bad == [], f"{page}: {bad}"
    errors = browser.errors()
    assert errors == [], f"{page}: {errors}"


def shown(browser: Any) -> str:
    """All the text the page shows, charts (SVG) included."""
    text: str = browser.driver.execute_script("return document.documentElement.textContent;")
    return text
