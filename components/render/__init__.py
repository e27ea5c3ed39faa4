"""Rendered artefacts of the plan: launch commands, pipeline configs, start-up shell commands.

Pure functions of (settings, plan instance); the components pass their results to Pulumi
resources unchanged, and the tests run the shell strings for real. One module per component,
beside it in name: `vllm`, `paddlex`, `gateway`, `keeper`, `topology` (the stack output), and
`common` for what they share; the balancer's is `components/haproxy.py`, the recycler's and
Prometheus' sit in their own modules. A component imports its own module; this package
re-exports every name for the tests and tools that read several.

    >>> from components.settings import load_settings
    >>> from components.plan import build_plan
    >>> settings = load_settings({"cards": "1"})
    >>> paddlex = build_plan(settings).paddlex[0]
    >>> paddlex_argv(settings, paddlex)[:4]
    ['paddlex', '--serve', '--device', 'npu']
"""

from components.render.common import (
    CONFIG_TEMPLATES,
    CURL_PROBE,
    MODEL_DIR_IN_CONTAINER,
    PROBE,
    PYTHON_PROBE,
    SERVING_FILE,
    SIM_FAULTS_ENV,
    SIM_LOAD_ENV,
    config_install_command,
    container_started_command,
    content_hash,
    generation_name,
    image_cleanup_command,
    service_ready_command,
    serving_probe,
    wait_for_http,
)
from components.render.gateway import (
    GATEWAY_DEFAULTS,
    JOBS_DIR_IN_CONTAINER,
    LOCAL_TOKEN_FILE,
    gateway_argv,
    gateway_config,
    gateway_config_install_command,
    gateway_config_json,
    gateway_handover_path,
    gateway_ready_command,
    gateway_settings,
    gateway_upstream,
)
from components.render.keeper import (
    KEEPER_HANDOVER_DIR_IN_CONTAINER,
    keeper_argv,
    keeper_config_json,
    keeper_handover_dir,
    keeper_ready_command,
)
from components.render.paddlex import (
    PIPELINE_TEMPLATE,
    START_LOCK_WAIT_S,
    STOP_WAIT_S,
    lock_file,
    paddlex_argv,
    paddlex_env,
    paddlex_idle_argv,
    paddlex_ready_command,
    paddlex_service_script,
    paddlex_start_command,
    paddlex_stop_command,
    pid_file,
    pipeline_config,
    pipeline_config_yaml,
)
from components.render.topology import (
    topology,
)
from components.render.vllm import (
    official_model_name,
    vllm_argv,
    vllm_env,
    vllm_ready_command,
)

__all__ = [
    "CONFIG_TEMPLATES",
    "CURL_PROBE",
    "GATEWAY_DEFAULTS",
    "JOBS_DIR_IN_CONTAINER",
    "KEEPER_HANDOVER_DIR_IN_CONTAINER",
    "LOCAL_TOKEN_FILE",
    "MODEL_DIR_IN_CONTAINER",
    "PIPELINE_TEMPLATE",
    "PROBE",
    "PYTHON_PROBE",
    "SERVING_FILE",
    "SIM_FAULTS_ENV",
    "SIM_LOAD_ENV",
    "START_LOCK_WAIT_S",
    "STOP_WAIT_S",
    "config_install_command",
    "container_started_command",
    "content_hash",
    "gateway_argv",
    "gateway_config",
    "gateway_config_install_command",
    "gateway_config_json",
    "gateway_handover_path",
    "gateway_ready_command",
    "gateway_settings",
    "gateway_upstream",
    "generation_name",
    "image_cleanup_command",
    "keeper_argv",
    "keeper_config_json",
    "keeper_handover_dir",
    "keeper_ready_command",
    "lock_file",
    "official_model_name",
    "paddlex_argv",
    "paddlex_env",
    "paddlex_idle_argv",
    "paddlex_ready_command",
    "paddlex_service_script",
    "paddlex_start_command",
    "paddlex_stop_command",
    "pid_file",
    "pipeline_config",
    "pipeline_config_yaml",
    "service_ready_command",
    "serving_probe",
    "topology",
    "vllm_argv",
    "vllm_env",
    "vllm_ready_command",
    "wait_for_http",
]
