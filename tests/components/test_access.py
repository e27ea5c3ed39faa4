"""Access to the gateway under Pulumi mocks: tokens are secrets, only their hashes are deployed."""

import hashlib
import json

import pytest

from components.settings import ConfigError
from tests.pulumi_harness import CONTAINER, Recording, record_stack

TEAM_TOKEN = "team-a-token-0123456789abcdef"
OPS_TOKEN = "ops-token-0123456789abcdef"
SECRETS = {
    "tokens": json.dumps({"team-a": {"token": TEAM_TOKEN, "maxInFlight": 8, "ratePerS": 20}}),
    "adminTokens": json.dumps({"ops": OPS_TOKEN}),
}


def test_a_stack_without_tokens_is_refused_saying_how_to_add_one():
    recording = Recording()
    with pytest.raises(ConfigError, match="config key 'tokens': no gateway token") as error:
        record_stack({"cards": "1", "allowOpenAccess": "false"}, recording=recording)
    assert "pulumi config set --secret --path 'tokens.team-a'" in str(error.value)
    assert "allowOpenAccess true" in str(error.value)
    assert recording.resources == []


def test_open_access_is_an_explicit_choice():
    recording = record_stack({"cards": "1", "allowOpenAccess": "true"})
    config = json.loads(recording.named("local-gateway").inputs["uploads"][0]["content"])
    assert not config.get("auth", {}).get("tokens")


def test_tokens_in_plaintext_config_are_refused_without_echoing_them():
    recording = Recording()
    with pytest.raises(ConfigError, match="config key 'tokens': must be a secret") as error:
        record_stack({"cards": "1", "tokens": SECRETS["tokens"]}, recording=recording)
    assert TEAM_TOKEN not in str(error.value) and recording.resources == []


def test_a_short_token_is_refused_without_echoing_it():
    with pytest.raises(ConfigError, match="at least 16 characters") as error:
        record_stack({"cards": "1"}, secrets={"tokens": '{"team-a": "tiny-secret"}'})
    assert "tiny-secret" not in str(error.value)


def test_only_the_hashes_reach_the_gateway_config_and_no_token_reaches_anything():
    recording = record_stack({"cards": "1"}, secrets=SECRETS)
    (gateway,) = [r for r in recording.of_type(CONTAINER) if r.name == "local-gateway"]
    auth = json.loads(gateway.inputs["uploads"][0]["content"])["auth"]
    assert auth["tokens"] == [
        {
            "name": "team-a",
            "sha256": hashlib.sha256(TEAM_TOKEN.encode()).hexdigest(),
            "max_in_flight": 8,
            "rate_per_s": 20,
        }
    ]
    assert auth["admin_tokens"] == [
        {"name": "ops", "sha256": hashlib.sha256(OPS_TOKEN.encode()).hexdigest()}
    ]
    everything = json.dumps([r.inputs for r in recording.resources]) + json.dumps(
        recording.outputs, default=str
    )
    assert TEAM_TOKEN not in everything and OPS_TOKEN not in everything
