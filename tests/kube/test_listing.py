"""A list page decoded item by item as it streams (kube/listing.py, kube/jsonstream.py):
the real API server's bytes cut into pieces of any size give what json.loads gives, and
malformed or hostile pages give a clear error naming what was wrong or the cap."""

import json

import pytest

from kube_scale_exporter.kube import jsonstream
from kube_scale_exporter.kube.client import ReplyTooLarge
from kube_scale_exporter.kube.listing import decode
from testbed.kube_apiserver import pod_manifest

# Annotations of all kinds of text: non-ASCII (decoded again as UTF-8), escapes, brackets
# inside strings, and one value long enough for several pieces.
ANNOTATIONS = {
    "note": 'é 😀 " \\ \u2028 {[ ]} \\"',
    "trailing-backslash": "a\\",
    "quoted-bracket": 'say "{" or "[["',
    "big": "x" * 200_000,
}


def raw(api, path, **params):
    """The API server's reply as bytes, as the exporter reads it."""
    resp = api.admin.session.get(
        api.server + path,
        params=params,
        headers={"Authorization": f"Bearer {api.admin.token}"},
        verify=api.admin.ca,
        timeout=30,
    )
    assert resp.status_code == 200, resp.text[:300]
    return resp.content


def pieces(data, size):
    return [data[i : i + size] for i in range(0, len(data), size)]


def decoded(chunks, cap=(500, "limit=500 was asked")):
    items = []
    meta = decode(chunks, items.append, cap, "GET /x")
    return meta, items


@pytest.fixture(scope="module")
def page(apiserver):
    ns = "listing"
    apiserver.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    for i in range(4):
        pod = pod_manifest(f"p{i}", labels={"i": str(i)})
        pod["metadata"]["annotations"] = ANNOTATIONS
        apiserver.admin.create(f"/api/v1/namespaces/{ns}/pods", pod)
    return raw(apiserver, f"/api/v1/namespaces/{ns}/pods", limit="3")


@pytest.mark.integration
@pytest.mark.parametrize("long_value", [jsonstream.LONG_VALUE, 64], ids=["parsed", "extent"])
@pytest.mark.parametrize("size", [1, 7, 4096, 65536])
def test_a_real_page_in_pieces_of_any_size(page, size, long_value, monkeypatch):
    monkeypatch.setattr(jsonstream, "LONG_VALUE", long_value)
    whole = json.loads(page)
    assert len(whole["items"]) == 3 and whole["metadata"]["continue"]
    meta, items = decoded(pieces(page, size))
    assert meta == whole["metadata"]
    assert items == whole["items"]
    assert items[0]["metadata"]["annotations"] == ANNOTATIONS


@pytest.mark.unit
@pytest.mark.parametrize(
    "body,words",
    [
        (b"", "ends early"),
        (b"[]", "expected '{'"),
        (b'{"items":[{"a":1}', "ends early"),
        (b'{"items":[1,]}', "not JSON"),
        (b'{"items":[1 2]}', "expected ',' or ']'"),
        (b'{"items":{}}', "items as a list"),
        (b'{"items":[]} x', "data after the list"),
        (b'{"items":["\xff"]}', "utf-8"),
        (b'{"items":[' + b"[" * 5000, "recursion"),
        (b'{"items":[' + b"1" * 5000 + b"]}", "digits"),
    ],
)
@pytest.mark.parametrize("size", [1, 65536])
def test_malformed_pages_are_a_clear_error(body, words, size):
    with pytest.raises(ValueError, match="GET /x: ") as caught:
        decoded(pieces(body, size))
    assert words in str(caught.value)


def endless(head, piece):
    yield head
    while True:
        yield piece * (65536 // len(piece))


@pytest.mark.unit
@pytest.mark.parametrize(
    "chunks,cap",
    [
        (endless(b'{"items":[', b" "), "MAX_ITEM_BYTES"),
        (endless(b'{"items":["', b"x"), "MAX_ITEM_BYTES"),
        (endless(b'{"items":[{"a":"', b"\\"), "MAX_ITEM_BYTES"),
        (endless(b'{"items":[{"a":[', b"{},"), "MAX_OBJECT_VALUES"),
        (endless(b'{"items":[', b'{"metadata":{"name":"x"}},'), "limit=500 was asked"),
    ],
    ids=["whitespace", "string", "escapes", "tiny-values", "items"],
)
def test_endless_pages_stop_at_a_cap(chunks, cap):
    with pytest.raises(ReplyTooLarge, match=cap):
        decoded(chunks)
