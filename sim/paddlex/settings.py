"""What the stand-in pipeline reads from a PaddleOCR-VL pipeline config.

Only plain dicts here (no paddlex import), so the parsing is testable on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SERVER_BACKENDS = (
    "fastdeploy-server",
    "vllm-server",
    "sglang-server",
    "mlx-vlm-server",
    "llama-cpp-server",
)
VL_PIPELINES = ("PaddleOCR-VL", "PaddleOCR-VL-1.5", "PaddleOCR-VL-1.6")
DEFAULT_MARKDOWN_IGNORE_LABELS = (
    "number",
    "footnote",
    "header",
    "header_image",
    "footer",
    "footer_image",
    "aside_text",
)


class ConfigError(ValueError):
    """The pipeline config cannot build a (simulated) PaddleOCR-VL pipeline."""


@dataclass(frozen=True)
class PipelineSettings:
    """The pipeline-level defaults and the VLM binding of one pipeline config."""

    pipeline_name: str
    server_url: str
    model_name: str
    backend: str = "vllm-server"
    max_concurrency: int = 200
    timeout_s: float = 600.0
    use_doc_preprocessor: bool = True
    use_layout_detection: bool = True
    use_chart_recognition: bool = False
    use_seal_recognition: bool = False
    use_ocr_for_image_block: bool = False
    format_block_content: bool = False
    merge_layout_blocks: bool = True
    markdown_ignore_labels: list[str] = field(
        default_factory=lambda: list(DEFAULT_MARKDOWN_IGNORE_LABELS)
    )


def _section(config: dict[str, Any], *path: str) -> dict[str, Any]:
    node: Any = config
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise ConfigError("missing section " + ".".join(path[: path.index(key) + 1]))
    return node


def read_settings(config: dict[str, Any]) -> PipelineSettings:
    """Validate `config` the way building the real pipeline would fail, and extract settings."""
    name = config.get("pipeline_name")
    if name not in VL_PIPELINES:
        raise ConfigError(f"pipeline_name must be one of {VL_PIPELINES}, got {name!r}")
    vl_rec = _section(config, "SubModules", "VLRecognition")
    genai = vl_rec.get("genai_config") or {}
    backend = genai.get("backend", "native")
    if backend not in SERVER_BACKENDS:
        raise ConfigError(
            f"VLRecognition.genai_config.backend {backend!r} needs local model weights; "
            f"the simulator serves only a server backend {SERVER_BACKENDS}"
        )
    server_url = genai.get("server_url")
    if not server_url:
        raise ConfigError(f"`server_url` must not be `None` for the {backend!r} backend.")
    client_kwargs = genai.get("client_kwargs") or {}
    model_name = client_kwargs.get("model_name") or vl_rec.get("model_name")
    if not model_name:
        raise ConfigError("SubModules.VLRecognition.model_name is required")
    return PipelineSettings(
        pipeline_name=name,
        server_url=str(server_url).rstrip("/"),
        model_name=str(model_name),
        backend=backend,
        max_concurrency=int(genai.get("max_concurrency", 200)),
        timeout_s=float(client_kwargs.get("timeout", 600.0)),
        use_doc_preprocessor=bool(config.get("use_doc_preprocessor", True)),
        use_layout_detection=bool(config.get("use_layout_detection", True)),
        use_chart_recognition=bool(config.get("use_chart_recognition", False)),
        use_seal_recognition=bool(config.get("use_seal_recognition", False)),
        use_ocr_for_image_block=bool(config.get("use_ocr_for_image_block", False)),
        format_block_content=bool(config.get("format_block_content", False)),
        merge_layout_blocks=bool(config.get("merge_layout_blocks", True)),
        markdown_ignore_labels=list(
            config.get("markdown_ignore_labels", DEFAULT_MARKDOWN_IGNORE_LABELS)
        ),
    )
