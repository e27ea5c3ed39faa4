"""Settings: defaults, the forms Pulumi hands values over in, and every config error by key."""

import pytest

from components.settings import ConfigError, load_settings


def test_defaults_describe_eight_ascend_cards_with_the_seeds_values():
    settings = load_settings({})
    (host,) = settings.hosts
    assert host.name == "local" and host.accelerator == "ascend"
    assert host.card_ids == tuple(range(8))
    assert settings.vllm_per_card == 2 and settings.paddlex_per_vllm == 3
    assert settings.memory_fraction == 0.45
    assert settings.served_model_name == "PaddleOCR-VL-1.5-0.9B"
    assert settings.container_model_path == "/data/PaddleOCR-VL-1.5-0.9B"
    assert settings.gateway_port == 9101
    assert settings.vllm_ready_timeout >= 600


def test_cards_as_pulumi_hands_it_over_a_plain_string():
    assert load_settings({"cards": "3"}).hosts[0].card_ids == (0, 1, 2)


@pytest.mark.parametrize("raw", ["[2, 5, 7]", "2,5,7", "2 5 7"])
def test_explicit_card_ids(raw):
    assert load_settings({"cardIds": raw}).hosts[0].card_ids == (2, 5, 7)


def test_memory_fraction_defaults_to_point_nine_over_instances_per_card():
    assert load_settings({"vllmPerCard": "3"}).memory_fraction == 0.3


def test_structured_values_arrive_as_json_text():
    settings = load_settings(
        {
            "vllmExtraArgs": '["--max-model-len", "16384"]',
            "gateway": '{"load_balance": {"mode": "queue"}}',
        }
    )
    assert settings.vllm_extra_args == ("--max-model-len", "16384")
    assert settings.gateway == {"load_balance": {"mode": "queue"}}


def test_extra_args_as_a_plain_string_are_split_like_a_shell():
    settings = load_settings({"vllmExtraArgs": "--max-num-seqs 128 --enforce-eager"})
    assert settings.vllm_extra_args == ("--max-num-seqs", "128", "--enforce-eager")


def test_settings_are_frozen():
    settings = load_settings({})
    with pytest.raises(ValueError):
        settings.vllm_per_card = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"cards": "0"}, "config key 'cards': must be a positive integer, got '0'"),
        ({"cards": "-2"}, "config key 'cards': must be a positive integer"),
        ({"cards": "2.5"}, "config key 'cards': must be a positive integer, got '2.5'"),
        ({"cards": "eight"}, "config key 'cards': must be a positive integer"),
        ({"vllmPerCard": "0"}, "config key 'vllmPerCard': Input should be greater than 0"),
        ({"paddlexPerVllm": "1.5"}, "config key 'paddlexPerVllm'"),
        ({"cardIds": "1,1,2"}, "config key 'cardIds': card ids repeated: [1]"),
        ({"cardIds": "[-1]"}, "config key 'cardIds': card id -1 is negative"),
        ({"gpuMemoryUtilization": "0.6"}, "config key 'gpuMemoryUtilization': 0.6 x 2"),
        ({"gpuMemoryUtilization": "1.5"}, "config key 'gpuMemoryUtilization'"),
        ({"gatewayPort": "70000"}, "config key 'gatewayPort': Input should be less than"),
        ({"vllmBasePort": "0"}, "config key 'vllmBasePort'"),
        ({"accelerator": "tpu"}, "config key 'accelerator': Input should be 'ascend'"),
        ({"card": "8"}, "config key 'card': unknown setting; did you mean 'cards'?"),
        ({"gateway": "{not json"}, "config key 'gateway': not valid JSON"),
        (
            {"gateway": '{"load_balance": {"mode": "fastest"}}'},
            "config key 'gateway.load_balance.mode': unknown mode 'fastest'",
        ),
        ({"gateway": '{"upstreams": []}'}, "config key 'gateway.upstreams': set by the fleet"),
        ({"portFirstCard": "9"}, "config key 'portFirstCard': card 9 is not one of the cards"),
        ({"gatewayHost": "nowhere"}, "config key 'gatewayHost': no host named 'nowhere'"),
        ({"cards": "2", "cardIds": "1"}, None),
    ],
)
def test_config_errors_name_the_key_and_the_problem(raw, message):
    if message is None:  # cardIds wins over cards: no error
        assert load_settings(raw).hosts[0].card_ids == (1,)
        return
    with pytest.raises(ConfigError) as error:
        load_settings(raw)
    assert message in str(error.value)


def test_hosts_list_with_defaults_from_the_top_level_keys():
    settings = load_settings(
        {
            "accelerator": "sim",
            "hosts": '[{"name": "a", "endpoint": "unix:///var/run/docker.sock", "cards": 2},'
            ' {"name": "b", "endpoint": "ssh://ops@gpu-b.example", "cardIds": [3],'
            ' "accelerator": "nvidia", "vllmBasePort": 9525}]',
        }
    )
    a, b = settings.hosts
    assert (a.accelerator, a.card_ids, a.address) == ("sim", (0, 1), "127.0.0.1")
    assert (b.accelerator, b.card_ids, b.address) == ("nvidia", (3,), "gpu-b.example")
    assert b.vllm_base_port == 9525 and b.paddlex_base_port == 9120


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ('[{"name": "a", "cards": 1}]', "config key 'hosts[0].endpoint': missing"),
        (
            '[{"name": "a", "endpoint": "unix:///x.sock", "cards": 1},'
            ' {"name": "a", "endpoint": "unix:///y.sock", "cards": 1}]',
            "config key 'hosts': host names repeated: ['a']",
        ),
        (
            '[{"name": "a", "endpoint": "unix:///x.sock", "cards": 1, "accelerator": "fpga"}]',
            "config key 'hosts[0].accelerator'",
        ),
        ('[{"name": "a", "endpoint": "ftp://a", "cards": 1}]', "unsupported Docker endpoint"),
        ("[]", "config key 'hosts': must be a non-empty list"),
        ('[{"endpoint": "unix:///x.sock"}]', "config key 'hosts[0].name': missing"),
    ],
)
def test_host_config_errors(hosts, message):
    with pytest.raises(ConfigError) as error:
        load_settings({"hosts": hosts})
    assert message in str(error.value)


def test_a_nested_card_list_set_with_path_arrives_as_text_and_is_accepted():
    # `pulumi config set --path 'hosts[1].cardIds' '[0,1,2,3]'` stores the value as a string.
    hosts = '[{"name": "gpu-b", "endpoint": "ssh://ops@gpu-b", "cardIds": "[0,1,2,3]"}]'
    (host,) = load_settings({"hosts": hosts}).hosts
    assert host.card_ids == (0, 1, 2, 3)
    hosts = '[{"name": "gpu-b", "endpoint": "ssh://ops@gpu-b", "cardIds": "[0,1"}]'
    with pytest.raises(ConfigError, match=r"config key 'hosts\[0\]\.cardIds': not valid JSON"):
        load_settings({"hosts": hosts})


def test_a_relative_model_dir_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="config key 'modelDir': must be an absolute path"):
        load_settings({"modelDir": "models/PaddleOCR"})


def test_one_remote_docker_host_is_probed_and_reached_at_its_own_address():
    (host,) = load_settings({"dockerHost": "ssh://ops@npu-a.example"}).hosts
    assert host.address == "npu-a.example"
    assert host.docker_endpoint == "ssh://ops@npu-a.example"
    (host,) = load_settings({"dockerHost": "ssh://ops@npu-a", "hostAddress": "10.0.0.5"}).hosts
    assert host.address == "10.0.0.5"


def test_the_local_endpoint_is_explicit_so_docker_context_cannot_split_engines():
    (host,) = load_settings({}).hosts
    assert host.endpoint is None and host.docker_endpoint == "unix:///var/run/docker.sock"


def test_platform_and_build_args_per_host_with_top_level_defaults():
    hosts = (
        '[{"name": "kunpeng", "endpoint": "ssh://ops@k1", "platform": "linux/arm64",'
        ' "buildArgs": "{\\"BASE_IMAGE\\": \\"local/python:3.11-arm64\\"}"},'
        ' {"name": "x86", "endpoint": "ssh://ops@x1"}]'
    )
    settings = load_settings({"hosts": hosts, "platform": "linux/amd64"})
    kunpeng, x86 = settings.hosts
    assert kunpeng.platform == "linux/arm64"
    assert kunpeng.build_args == {"BASE_IMAGE": "local/python:3.11-arm64"}
    assert x86.platform == "linux/amd64" and x86.build_args == {}
    with pytest.raises(ConfigError, match=r"config key 'platform'"):
        load_settings({"platform": "arm64"})


FAULTS = '{"garble": 0.3, "empty": 0.1, "fail": 0.05, "slowShare": 0.5, "slowSeconds": 2}'


def test_sim_vllm_faults_are_read_from_json_or_path_set_text():
    faults = load_settings({"accelerator": "sim", "simVllmFaults": FAULTS}).sim_vllm_faults
    assert faults is not None
    assert (faults.garble, faults.empty, faults.fail) == (0.3, 0.1, 0.05)
    assert (faults.slow_share, faults.slow_seconds, faults.seed) == (0.5, 2.0, 0)
    # `pulumi config set --path simVllmFaults.garble 0.25` stores the number as text
    text = load_settings({"accelerator": "sim", "simVllmFaults": '{"garble": "0.25", "seed": 3}'})
    assert text.sim_vllm_faults is not None and text.sim_vllm_faults.garble == 0.25
    assert load_settings({"accelerator": "sim"}).sim_vllm_faults is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '{"garble": 1.5}',
            "config key 'simVllmFaults.garble': Input should be less than or equal to 1",
        ),
        (
            '{"fail": -0.1}',
            "config key 'simVllmFaults.fail': Input should be greater than or equal to 0",
        ),
        (
            '{"garble": 0.6, "empty": 0.3, "fail": 0.2}',
            "config key 'simVllmFaults': garble + empty + fail = 1.1, more than 1",
        ),
        (
            '{"slowShare": 0.5, "slowSeconds": -1}',
            "config key 'simVllmFaults.slowSeconds': Input should be greater than or equal to 0",
        ),
        (
            '{"slowShare": 1, "slowSeconds": Infinity}',
            "config key 'simVllmFaults.slowSeconds': Input should be a finite number",
        ),
        ('{"slowShare": 0.5}', "config key 'simVllmFaults': slowShare needs slowSeconds"),
        ('{"slowSeconds": 2}', "config key 'simVllmFaults': slowSeconds needs slowShare"),
        ('{"garbel": 0.3}', "config key 'simVllmFaults.garbel': Extra inputs are not permitted"),
        ('{"seed": 1.5}', "config key 'simVllmFaults.seed'"),
        ('{"garble": 0.3', "config key 'simVllmFaults': not valid JSON"),
        ("0.3", "config key 'simVllmFaults': Input should be a valid dictionary"),
    ],
)
def test_sim_vllm_faults_errors_name_the_key(value, message):
    with pytest.raises(ConfigError) as error:
        load_settings({"accelerator": "sim", "simVllmFaults": value})
    assert message in str(error.value)


def test_sim_vllm_faults_apply_only_to_sim_hosts():
    with pytest.raises(ConfigError, match="'simVllmFaults': applies only to hosts of accelerator"):
        load_settings({"cards": "1", "simVllmFaults": '{"garble": 0.3}'})
