"""What goes to a parse process and back is pickled as field values: nothing is lost on the way."""

from __future__ import annotations

import dataclasses
import pickle
from decimal import Decimal
from pathlib import Path

from forager.discovery.rules import LinkPolicy, Rule
from forager.parse.base import ProductRecord
from forager.parse.items import CheckedItem
from forager.queue.urls import Link, normalize_url
from forager.worker.parsing import Parsed, ParseJob


def _every_field_set(value: object) -> None:
    """Each field of ``value`` differs from its default (so a field dropped on the way shows)."""
    for item in dataclasses.fields(value):  # type: ignore[arg-type]
        if item.default is not dataclasses.MISSING:
            assert getattr(value, item.name) != item.default, item.name


def test_a_job_and_its_answer_cross_unchanged() -> None:
    policy = LinkPolicy(
        7, "domain", ("shop.example",), (Rule("/p/*", "parse", "glob"),), True, 3, 900
    )
    job = ParseJob(
        "https://shop.example/p/1",
        "generic",
        b"<html>\xc3\xa9</html>",
        "text/html; charset=utf-8",
        203,
        False,
        (4, 2, {"price": ".price"}),
        True,
        Path("/tmp/pages"),
        "pack-1",
        ("css", {"price": ".p"}),
        policy,
        True,
        True,
        ("https://shop.example/sitemap.xml",),
        True,
    )
    _every_field_set(job)
    record = ProductRecord(
        "https://shop.example/p/1",
        "Lamp",
        "A lamp",
        Decimal("49.90"),
        "EUR",
        Decimal("59.90"),
        Decimal("4.5"),
        12,
        "InStock",
        True,
        "Lumo",
        "Lights",
        "LMP-1",
        "4006381333931",
        "M-1",
        "B0000",
        ["https://shop.example/1.jpg"],
        "generic",
        "5",
        {"price": 0.9},
        ["no_image"],
    )
    _every_field_set(record)
    link = Link(normalize_url("https://shop.example/p/2"), "parse", None, 3600)
    answer = Parsed(
        ("captcha", "a robot check"),
        b"gz",
        "pack-1@0+2",
        2,
        "disk full",
        record,
        (CheckedItem("ad", "1", {"a": 1}, "hash"),),
        ("parse", "no product"),
        "Traceback",
        ({"price": "1"}, {"sku": "missing"}),
        {"price": "1"},
        (link,),
        4,
        "scripts",
        (),
    )
    for value in (job, answer, record):
        assert pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)) == value
