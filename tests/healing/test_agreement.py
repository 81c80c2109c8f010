"""The ranks agree on JSON documents, never on pickles (issue 46): the decoder and the
rollback request's document, and two real gloo ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tensortap
from tensortap.core._rollback_decision import Evidence
from tensortap.exceptions import FormatError
from tensortap.healing._agreement import decode_document, encode_document, gather_documents
from tensortap.healing._budget import MicroBatches, TrainedAt
from tensortap.healing._requests import Request
from tests.conftest import helper_cmd
from tests.helpers.ranks import run_ranks


def test_one_process_gathers_its_own_document() -> None:
    doc = {"a": [1, "b"]}
    assert gather_documents(doc) == [doc]


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"\xff\xfe", "rank 3's document is not UTF-8 JSON"),
        (b'{"a": ', "rank 3's document is not UTF-8 JSON"),
        (b'{"a": NaN}', "NaN is not a JSON number"),
        (b"[" + b"1," * 600 + b"1]", "rank 3's document has 1203 bytes, more than the 1000"),
    ],
)
def test_a_damaged_or_oversized_document_is_a_clear_error(raw: bytes, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        decode_document(raw, 3, limit=1000)


def test_a_document_that_is_not_json_is_refused_before_it_is_sent() -> None:
    with pytest.raises(FormatError, match="must be JSON values"):
        encode_document({"x": float("nan")})
    with pytest.raises(FormatError, match="must be JSON values"):
        encode_document({"x": object()})


def test_a_request_travels_as_json_and_comes_back_equal() -> None:
    ids = [3, "b7", (1, "x"), MicroBatches((4, 5)), TrainedAt(9), None]
    evidence = {
        3: Evidence("data", 3, 3, "0", "bad batch", 1),
        (1, "x"): Evidence("numerics", 2, (1, "x"), None, "", 0),
    }
    request = Request(3, ids, "a check", evidence)
    back = Request.from_doc(json.loads(encode_document(request.to_doc())), 1)
    assert back == request
    assert isinstance(back.ids[3], MicroBatches)
    # an id of another type arrives as its repr
    odd = Request.from_doc(json.loads(encode_document(Request(1, [frozenset()]).to_doc())), 1)
    assert odd.ids == ["frozenset()"]


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"step": "3", "ids": [], "reason": "", "evidence": []},
        {"step": 3, "ids": [{"pickle": "x"}], "reason": "", "evidence": []},
        {"step": 3, "ids": [], "reason": "", "evidence": [[1, "data", 1, None, ""]]},
    ],
)
def test_a_malformed_request_names_the_rank(doc: object) -> None:
    with pytest.raises(FormatError, match="rank 2's rollback request"):
        Request.from_doc(doc, 2)


def test_two_gloo_ranks_gather_json_and_refuse_an_oversized_document_alike(
    helper_env: dict[str, str],
) -> None:
    src = str(Path(tensortap.__file__).parents[1])
    done = run_ranks(
        helper_cmd("agreement_ranks.py"), 2, dict(helper_env, PYTHONPATH=src), timeout=200
    )
    for p in done:
        assert p.returncode == 0, p.stderr
    results = [json.loads(p.stdout.strip().splitlines()[-1]) for p in done]
    expected = [{"rank": 0, "text": "é"}, {"rank": 1, "text": "é" * 41}]
    for result in results:
        assert result["gathered"] == expected
        assert "rank 1's document has 2011 bytes, more than the 1000" in result["error"]
