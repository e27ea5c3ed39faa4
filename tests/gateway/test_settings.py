"""gateway.config.settings: the seed config loads unchanged, defaults, errors naming the key."""

from __future__ import annotations

import pytest

from gateway.config.settings import (
    DEFAULT_MODE,
    ConfigError,
    load_settings,
    parse_settings,
    parse_settings_text,
    strip_json_comments,
)

# The seed's config.json (section 七), verbatim including its // comments.
SEED_CONFIG = """{
  "upstreams": [
    "http://127.0.0.1:9120", "http://127.0.0.1:9121",
    // ... 共48个 paddlex 实例
    "http://127.0.0.1:9177"
  ],
  "load_balance": {
    "mode": "round_robin",    // round_robin 或 random
    "max_attempts": 12        // 单次请求最多尝试的上游数
  },
  "http": {
    "timeout_s": 300,         // OCR单次请求可能耗时较长
    "pool_max_connections": 200,
    "pool_max_keepalive_connections": 100
  },
  "postprocess": {
    "strip_images": true,     // 去除结果中的图片Markdown标签
    "remove_repeated_hui": {  // 清理签名区识别噪点（连续"回"字）
      "enabled": true,
      "min_repeats": 2
    }
  }
}
"""


def test_seed_config_loads_unchanged(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(SEED_CONFIG, encoding="utf-8")
    s = load_settings(path)
    assert s.upstream_urls == [
        "http://127.0.0.1:9120",
        "http://127.0.0.1:9121",
        "http://127.0.0.1:9177",
    ]
    assert s.load_balance.mode == "round_robin"
    assert s.load_balance.max_attempts == 12
    assert s.http.timeout_s == 300
    assert s.http.pool_max_connections == 200
    assert s.http.pool_max_keepalive_connections == 100
    assert s.postprocess.strip_images is True
    assert s.postprocess.remove_repeated_hui.enabled is True
    assert s.postprocess.remove_repeated_hui.min_repeats == 2
    # new settings have defaults
    assert s.input.local_path_roots == []
    assert s.health.enabled is True
    assert s.retry_budget.budget_percent == 20


def test_default_mode_is_queue_when_not_named():
    s = parse_settings({"upstreams": ["http://a:1"]})
    assert s.load_balance.mode == DEFAULT_MODE == "queue"
    assert s.load_balance.upstream_concurrency == 1


def test_object_upstreams_with_topology():
    s = parse_settings(
        {
            "upstreams": [
                "http://127.0.0.1:9120/",
                {
                    "url": "http://127.0.0.1:9126",
                    "host": "local",
                    "card": 0,
                    "vllm": "http://127.0.0.1:9031",
                    "container": "paddle-9126-npu-0",
                },
            ]
        }
    )
    assert s.upstreams[0].url == "http://127.0.0.1:9120"
    assert s.upstreams[0].vllm is None
    assert s.upstreams[1].card == 0
    assert s.upstreams[1].vllm == "http://127.0.0.1:9031"
    assert s.upstreams[1].container == "paddle-9126-npu-0"


def test_unknown_mode_names_the_key():
    with pytest.raises(ConfigError) as err:
        parse_settings({"load_balance": {"mode": "foo"}})
    msg = str(err.value)
    assert msg.startswith("load_balance.mode: unknown mode 'foo' (expected one of")
    for name in ("round_robin", "random", "least_inflight", "p2c", "queue"):
        assert name in msg


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"load_balance": {"max_attempts": "many"}}, "load_balance.max_attempts"),
        ({"http": {"timeout_s": "slow"}}, "http.timeout_s"),
        (
            {"postprocess": {"remove_repeated_hui": {"min_repeats": []}}},
            "postprocess.remove_repeated_hui.min_repeats",
        ),
        ({"upstreams": ["ftp://x"]}, "upstreams[0]"),
        ({"upstreams": "http://a:1"}, "upstreams"),
        ({"upstreams": ["http://a:1", "http://a:1/"]}, "upstreams[1]"),
        ({"input": {"local_path_roots": "/tmp"}}, "input.local_path_roots"),
    ],
)
def test_wrong_type_names_the_key(data, key):
    with pytest.raises(ConfigError) as err:
        parse_settings(data)
    assert key in str(err.value)


def test_invalid_json_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="invalid JSON"):
        parse_settings_text("{", "x.json")
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="JSON object"):
        parse_settings([])


def test_comment_stripping_keeps_strings():
    text = '{"a": "http://x//y", /* block */ "b": "say \\"//\\"" // tail\n}'
    assert parse_settings_text('{"upstreams": ["http://x:1"] // c\n}').upstream_urls == [
        "http://x:1"
    ]
    stripped = strip_json_comments(text)
    assert '"http://x//y"' in stripped and "block" not in stripped and "tail" not in stripped
