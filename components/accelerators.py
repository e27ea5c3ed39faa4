"""The accelerator kinds a host can have, as one table.

Everything that differs between Ascend NPUs, NVIDIA GPUs and the simulator lives here, so the
planning and the components carry no `if kind == ...` branches.

    >>> KINDS["ascend"].device_nodes(3)
    ('/dev/davinci3', '/dev/davinci_manager', '/dev/devmm_svm', '/dev/hisi_hdc')
"""

from __future__ import annotations

from dataclasses import dataclass

ASCEND_DRIVER_MOUNTS: tuple[tuple[str, str], ...] = (
    ("/usr/local/dcmi", "/usr/local/dcmi"),
    ("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi"),
    ("/usr/local/Ascend/driver/lib64/", "/usr/local/Ascend/driver/lib64/"),
    ("/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/version.info"),
    ("/etc/ascend_install.info", "/etc/ascend_install.info"),
)


@dataclass(frozen=True)
class AcceleratorKind:
    """What one kind of accelerator needs from its containers."""

    name: str
    device_label: str
    vllm_name_prefix: str
    vllm_image: str
    paddlex_image: str
    paddlex_device: str
    privileged: bool
    vllm_shm_mb: int | None
    paddlex_shm_mb: int | None
    per_card_device_templates: tuple[str, ...] = ()
    shared_device_nodes: tuple[str, ...] = ()
    vllm_mounts: tuple[tuple[str, str], ...] = ()
    paddlex_mounts: tuple[tuple[str, str], ...] = ()
    visible_devices_env: str | None = None
    gpu_request: bool = False
    vllm_env: tuple[tuple[str, str], ...] = ()
    vllm_flags: tuple[str, ...] = ()
    paddlex_shell_setup: str | None = None
    tools: tuple[str, ...] = ()

    def device_nodes(self, card: int) -> tuple[str, ...]:
        """Host device nodes a container of `card` needs (empty where GPUs are requested)."""
        return tuple(t.format(card=card) for t in self.per_card_device_templates) + (
            self.shared_device_nodes
        )

    def card_env(self, card: int) -> tuple[tuple[str, str], ...]:
        if self.visible_devices_env is None:
            return ()
        return ((self.visible_devices_env, str(card)),)


KINDS: dict[str, AcceleratorKind] = {
    "ascend": AcceleratorKind(
        name="ascend",
        device_label="npu",
        vllm_name_prefix="vllm-ascend-paddleocr",
        vllm_image="quay.io/ascend/vllm-ascend:v0.19.1rc1",
        paddlex_image="paddleocrvl:20260529",
        paddlex_device="npu",
        privileged=True,
        vllm_shm_mb=100 * 1024,
        paddlex_shm_mb=128 * 1024,
        per_card_device_templates=("/dev/davinci{card}",),
        shared_device_nodes=("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"),
        vllm_mounts=ASCEND_DRIVER_MOUNTS,
        paddlex_mounts=(("/usr/local/Ascend/driver", "/usr/local/Ascend/driver"),),
        visible_devices_env="ASCEND_RT_VISIBLE_DEVICES",
        vllm_env=(
            ("TASK_QUEUE_ENABLE", "1"),
            ("CPU_AFFINITY_CONF", "1"),
            ("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"),
            ("VLLM_USE_MODELSCOPE", "true"),
        ),
        vllm_flags=(
            "--compilation-config",
            '{"cudagraph_mode":"FULL_DECODE_ONLY"}',
            "--additional_config",
            '{"enable_cpu_binding":true}',
        ),
        paddlex_shell_setup="source ~/.bashrc",
        tools=("npu-smi", "info"),
    ),
    "nvidia": AcceleratorKind(
        name="nvidia",
        device_label="gpu",
        vllm_name_prefix="vllm-paddleocr",
        vllm_image="vllm/vllm-openai:v0.11.1",
        paddlex_image="ccr-2vdh3abv-pub.cnc.bj.baidubce.com/paddlepaddle/paddleocr-vl:latest-nvidia-gpu-offline",
        paddlex_device="gpu",
        privileged=False,
        vllm_shm_mb=16 * 1024,
        paddlex_shm_mb=64 * 1024,
        gpu_request=True,
        vllm_env=(("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),),
        tools=("nvidia-smi",),
    ),
    "sim": AcceleratorKind(
        name="sim",
        device_label="sim",
        vllm_name_prefix="vllm-sim-paddleocr",
        vllm_image="paddleocr-fleet/vllm-sim:latest",
        paddlex_image="paddleocr-fleet/paddlex-sim:latest",
        paddlex_device="cpu",
        privileged=False,
        vllm_shm_mb=None,
        paddlex_shm_mb=None,
    ),
}
