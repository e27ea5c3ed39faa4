"""Reading the VLM binding from a pipeline config (pure; needs no PaddleX install)."""

from __future__ import annotations

import pytest

from sim.paddlex.settings import ConfigError, read_settings

from .helpers import MODEL, pipeline_config


def test_reads_server_url_and_model_name() -> None:
    settings = read_settings(pipeline_config("http://127.0.0.1:9031/v1/"))
    assert settings.server_url == "http://127.0.0.1:9031/v1"
    assert settings.model_name == MODEL
    assert settings.use_layout_detection and settings.use_doc_preprocessor


def test_client_kwargs_model_name_wins() -> None:
    config = pipeline_config("http://h:1/v1")
    config["SubModules"]["VLRecognition"]["genai_config"]["client_kwargs"] = {
        "model_name": "served",
        "timeout": 30,
    }
    settings = read_settings(config)
    assert (settings.model_name, settings.timeout_s) == ("served", 30.0)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.update(pipeline_name="OCR"), "pipeline_name"),
        (lambda c: c["SubModules"].pop("VLRecognition"), "SubModules.VLRecognition"),
        (lambda c: c["SubModules"]["VLRecognition"].pop("genai_config"), "local model weights"),
        (
            lambda c: c["SubModules"]["VLRecognition"]["genai_config"].pop("server_url"),
            "server_url",
        ),
        (lambda c: c["SubModules"]["VLRecognition"].pop("model_name"), "model_name"),
    ],
)
def test_invalid_configs_are_refused(mutate, message: str) -> None:
    config = pipeline_config("http://h:1/v1")
    mutate(config)
    with pytest.raises(ConfigError, match=message):
        read_settings(config)
