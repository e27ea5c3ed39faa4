"""Build the genuine PaddleX serving app over the stand-in pipeline.

    from sim.paddlex.app import build_app
    app = build_app("/etc/paddleocr-fleet/pipeline_config_vllm-9126.yaml")

`build_app` is what `paddlex --serve` does between reading the config and opening the port:
load the config with PaddleX's own loader, build the pipeline (here: the stand-in), and call
`paddlex.inference.serving.basic_serving.create_pipeline_app`. `Serving.visualize` and
`Serving.extra.max_num_input_imgs` (default 10 pages) are honoured by that genuine app.
Run the app under uvicorn or a TestClient context manager: its lifespan starts a non-daemon
worker thread that only a clean shutdown stops.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from paddlex.inference.pipelines import load_pipeline_config
from paddlex.inference.serving.basic_serving import create_pipeline_app

from .pipeline import SimPaddleOCRVLPipeline
from .settings import read_settings


def load_config(config_path: str | Path) -> dict[str, Any]:
    """Parse a pipeline YAML with PaddleX's loader (as `paddlex --serve --pipeline` does)."""
    path = str(config_path)
    if not path.endswith((".yaml", ".yml")):
        raise ValueError(f"the simulator takes a pipeline YAML path, got {path!r}")
    if not Path(path).is_file():
        raise FileNotFoundError(f"pipeline config not found: {path}")
    return load_pipeline_config(path)


def build_pipeline(config: dict[str, Any]) -> SimPaddleOCRVLPipeline:
    """The stand-in for `paddlex.create_pipeline(config)`; raises `ConfigError` like it would."""
    return SimPaddleOCRVLPipeline(read_settings(config))


def build_app(config_path: str | Path) -> FastAPI:
    """The FastAPI app `paddlex --serve --pipeline config_path` would serve (simulated VLM side)."""
    config = load_config(config_path)
    pipeline = build_pipeline(config)
    app = create_pipeline_app(pipeline, config)
    app.state.sim_pipeline = pipeline
    return app
