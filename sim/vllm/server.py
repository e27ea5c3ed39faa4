"""HTTP side of the vLLM simulator: the OpenAI-compatible endpoints vLLM serves.

Like vLLM, nothing listens while the "model" loads (`VLLM_SIM_LOAD_SECONDS`, default 3):
clients get connection refused, not 503. Then `/health`, `/v1/models` and
`/v1/chat/completions` answer in vLLM's shapes. Each completion names the simulator's port
(`sim-vllm:9031 ...`) and echoes the prompt and a digest of each image it was sent.
`VLLM_SIM_LATENCY_SECONDS` (default 0) adds a delay to each completion. `VLLM_SIM_FAULTS`
makes a bad release: shares of the completions garbled, empty, failed (HTTP 500) or slowed
(:mod:`sim.vllm.faults`). `/metrics` exports vLLM's own Prometheus series
(:mod:`sim.vllm.metrics`) and the injected faults; at most ``--max-num-seqs`` completions run
at once, the others wait, as in vLLM's scheduler.

Usage::

    app = build_app(parse_serve(["/models/m", "--port", "8118"]), Faults(garble=0.25))
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .args import ServeArgs
from .faults import FAULTS_ENV, FaultInjector, Faults, faults_from_env, garble
from .images import describe_image_url
from .metrics import VllmMetrics


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def error_response(status: int, kind: str, message: str, param: str | None = None) -> JSONResponse:
    """vLLM's ErrorResponse body."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


def _describe_content(content: Any) -> tuple[list[str], list[str]]:
    """Split an OpenAI message content into its texts and image descriptions."""
    if isinstance(content, str):
        return [content], []
    texts: list[str] = []
    images: list[str] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            url = part.get("image_url", {})
            images.append(describe_image_url(url.get("url", "") if isinstance(url, dict) else url))
    return texts, images


def answer_text(port: int, model: str, messages: list[dict[str, Any]]) -> str:
    """The simulated model output: who answered, and what it was asked."""
    texts: list[str] = []
    images: list[str] = []
    for message in messages:
        if message.get("role", "user") == "user":
            t, i = _describe_content(message.get("content", ""))
            texts += t
            images += i
    prompt = " ".join(texts).strip()[:200]
    parts = [f"sim-vllm:{port}", f"model={model}", f"prompt={json.dumps(prompt)}"]
    parts += [f"image={d}" for d in images]
    return " ".join(parts)


def build_app(args: ServeArgs, faults: Faults | None = None) -> FastAPI:
    """The FastAPI app of one loaded simulator instance, injecting ``faults`` (default: what
    ``VLLM_SIM_FAULTS`` asks for; ``ValueError`` when that is invalid)."""
    app = FastAPI(title="vLLM simulator", docs_url=None, redoc_url=None)
    created = int(time.time())
    latency = _env_float("VLLM_SIM_LATENCY_SECONDS", 0.0)
    metrics = VllmMetrics(args.served_model_name, args.max_num_seqs, args.max_model_len)
    injector = FaultInjector(faults_from_env() if faults is None else faults)

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": args.served_model_name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": args.model,
            "parent": None,
            "max_model_len": args.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return error_response(400, "BadRequestError", "Request body is not valid JSON")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error_response(400, "BadRequestError", "Field required: messages", "messages")
        model = body.get("model") or args.served_model_name
        if model != args.served_model_name:
            return error_response(
                404, "NotFoundError", f"The model `{model}` does not exist.", "model"
            )
        if body.get("stream"):
            return error_response(400, "BadRequestError", "stream=true is not simulated")
        prompt_tokens = sum(len(json.dumps(m)) // 4 for m in body["messages"])
        fault = injector.next()
        async with metrics.request(prompt_tokens) as done:
            if fault.delay > 0:
                metrics.fault("slow")
            if latency + fault.delay > 0:
                await asyncio.sleep(latency + fault.delay)
            if fault.kind is not None:
                metrics.fault(fault.kind)
            if fault.kind == "fail":
                return error_response(
                    500,
                    "InternalServerError",
                    f"simulated engine failure (completion {fault.number}, {FAULTS_ENV})",
                )
            text = answer_text(args.port, model, body["messages"])
            if fault.kind == "garble":
                text = garble(text, injector.faults.seed, fault.number)
            elif fault.kind == "empty":
                text = ""
            completion_tokens = max(1, len(text) // 4)
            done(completion_tokens)
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": text,
                            "refusal": None,
                            "annotations": None,
                            "audio": None,
                            "function_call": None,
                            "tool_calls": [],
                            "reasoning_content": None,
                        },
                        "logprobs": None,
                        "finish_reason": "stop",
                        "stop_reason": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                    "prompt_tokens_details": None,
                },
                "prompt_logprobs": None,
                "kv_transfer_params": None,
            }
        )

    return app


def serve(args: ServeArgs, faults: Faults | None = None) -> int:
    """Simulate the model load (port closed), then serve until SIGINT/SIGTERM, injecting
    ``faults`` (default: ``VLLM_SIM_FAULTS``'s)."""
    import uvicorn

    faults = faults_from_env() if faults is None else faults
    load_seconds = _env_float("VLLM_SIM_LOAD_SECONDS", 3.0)
    # As PID 1 of a container a process without a handler ignores SIGTERM: stop promptly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(
        f"INFO sim-vllm: loading {args.model} as {args.served_model_name!r} "
        f"for {load_seconds:g}s (port {args.port} closed)",
        file=sys.stderr,
        flush=True,
    )
    time.sleep(max(0.0, load_seconds))
    print(
        f"INFO sim-vllm: model loaded; serving on {args.host}:{args.port}",
        file=sys.stderr,
        flush=True,
    )
    if faults.active:
        print(f"INFO sim-vllm: injecting faults: {faults.describe()}", file=sys.stderr, flush=True)
    uvicorn.run(build_app(args, faults), host=args.host, port=args.port, log_level="info")
    return 0
