"""gateway.api.postprocess: each rule on its own and the configured combination."""

from __future__ import annotations

from gateway.api.postprocess import (
    collapse_blank_lines,
    postprocess,
    remove_repeated_hui,
    strip_images,
)
from gateway.config.settings import parse_settings

PADDLEX_IMAGE = (
    '<div style="text-align: center;"><img src="imgs/img_in_image_box_1_2_3_4.jpg" '
    'alt="Image" width="50%" /></div>'
)


def test_strip_markdown_and_html_images():
    text = f"a ![fig](imgs/x.jpg) b\n{PADDLEX_IMAGE}\nc <IMG SRC='y.png'> d"
    out = strip_images(text)
    assert "img" not in out.lower() and "![" not in out and "<div" not in out
    assert out.split() == ["a", "b", "c", "d"]


def test_strip_images_keeps_non_empty_div():
    assert strip_images('<div align="center">table</div>') == '<div align="center">table</div>'


def test_remove_repeated_hui_respects_min_repeats():
    assert remove_repeated_hui("签名回回回处 回 x回回", 2) == "签名处 回 x"
    assert remove_repeated_hui("回回 回回回", 3) == "回回 "
    assert remove_repeated_hui("回", 1) == ""


def test_collapse_blank_lines():
    assert collapse_blank_lines("\n\na  \n \n\n\t\nb\r\n\r\n\r\nc\n\n") == "a\n\nb\n\nc"


def test_postprocess_pipeline_and_switches():
    text = f"title\n\n{PADDLEX_IMAGE}\n\n\n回回回回\n\nbody"
    on = parse_settings({}).postprocess
    assert postprocess(text, on) == "title\n\nbody"
    off = parse_settings(
        {
            "postprocess": {
                "strip_images": False,
                "remove_repeated_hui": {"enabled": False},
                "collapse_blank_lines": False,
            }
        }
    ).postprocess
    assert postprocess(text, off) == text
    min3 = parse_settings({"postprocess": {"remove_repeated_hui": {"min_repeats": 5}}}).postprocess
    assert "回回回回" in postprocess(text, min3)
