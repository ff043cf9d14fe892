"""Which values are secrets, how URLs are shown, and that no cut leaves part of a key.

The run-level proof (every artifact of a real run searched for every credential) is
``tests/test_secrets.py``; these are the rules it rests on, over many inputs, and the endpoint
paths that quote a body: a 401 that echoes the key of a variable with any name, and a key that
straddles the point where an error message is cut.
"""

from __future__ import annotations

import base64
import string
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta import outward
from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.models.base import ModelContext, make_model
from pytest_gta.models.generation import GenerationSettings
from tests.helpers.scripted_server import ScriptedServer, Step
from tests.test_hostile_endpoints import REQUEST

KEY = "gw-key-2f7e9c1a5d3b"


@pytest.fixture(autouse=True)
def _fresh_registry():
    outward.forget_registered_secrets()
    yield
    outward.forget_registered_secrets()


# -- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "AWS_SECRET_ACCESS_KEY",
        "MY_SERVICE_KEY",
        "DB_PASSWD",
        "SMTP_PASSWORD",
        "GITHUB_TOKEN",
        "GCP_CREDENTIALS",
        "PROXY_AUTH",
        "STRIPE_APIKEY",
        "my_lowercase_secret",
        "OPENAI_API_KEY",
        "SERVICE_KEYS",
    ],
)
def test_credential_names(name):
    assert outward.is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["PATH", "HOME", "GIT_AUTHOR_NAME", "TOKENIZERS_PARALLELISM", "XAUTHORITY", "KEYBOARD", "PWD"],
)
def test_ordinary_names(name):
    assert not outward.is_secret_name(name)


def test_short_values_are_never_secrets(monkeypatch):
    monkeypatch.setenv("FEATURE_TOKEN", "1")
    outward.register_secret("EMPTY", "header X")
    assert outward.redact("1 EMPTY") == "1 EMPTY"


def test_unknown_named_variables_are_redacted(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_KEY", "svc-key-4a3b2c1d0e")
    assert outward.redact("x svc-key-4a3b2c1d0e y") == "x [redacted $MY_SERVICE_KEY] y"


# -- URLs --------------------------------------------------------------------------------------

PART = st.text(string.ascii_letters + string.digits + "-._~!$&'()*+,;=%@:", min_size=1)
HOST = st.sampled_from(["127.0.0.1", "gpu", "[::1]", "example.com:8443"])


@given(user=st.text(string.ascii_letters + string.digits, min_size=1), password=PART, host=HOST)
def test_a_masked_url_keeps_everything_but_the_password(user, password, host):
    url = f"http://{user}:{password}@{host}/v1?x=1"
    masked = outward.mask_url(url)
    assert masked == f"http://{user}:***@{host}/v1?x=1"
    assert urlsplit(masked).hostname == urlsplit(url).hostname


@given(password=PART)
def test_url_credentials_as_written_sent_and_encoded(password):
    found = outward.url_credentials(f"--gta-base-url=https://me:{password}@host/v1")
    assert password in found
    assert unquote(password) in found
    assert base64.b64encode(f"me:{unquote(password)}".encode()).decode() in found


def test_a_lone_userinfo_is_a_token():
    assert outward.mask_url("https://ghp_abcdefgh123@host/x") == "https://***@host/x"
    assert "ghp_abcdefgh123" in outward.url_credentials("https://ghp_abcdefgh123@host/x")


def test_urls_without_credentials_and_emails_are_left_alone():
    text = "see http://host/v1 and mail me@example.com or http://host/a@b"
    assert outward.mask_url(text) == text
    assert outward.url_credentials(text) == []


def test_run_secrets_from_arguments_headers_and_api_key_env():
    outward.register_run_secrets(
        ["--gta-tools=agentlego=http://u:agent-pass-123@gpu:16180"],
        {
            "api_key_env": "GATEWAY_ACCESS",
            "headers": {"X-Api-Key": "hdr-key-8d2c6b4a1e", "Authorization": "Bearer tok-12345678"},
            "api_key": "arg-key-0a1b2c3d",
            "max_model_len": 8192,
        },
        {"GATEWAY_ACCESS": KEY, "HTTPS_PROXY": "http://p:proxy-pass-99@proxy:3128"},
    )
    text = f"{KEY} agent-pass-123 hdr-key-8d2c6b4a1e tok-12345678 arg-key-0a1b2c3d proxy-pass-99"
    assert outward.redact(text) == (
        "[redacted $GATEWAY_ACCESS] [redacted URL password] [redacted header X-Api-Key] "
        "[redacted header Authorization] [redacted model arg api_key] [redacted URL password]"
    )
    # The name of the variable is no secret: labels stay readable through a second pass.
    assert outward.redact(outward.redact(KEY)) == "[redacted $GATEWAY_ACCESS]"


def test_reports_show_model_args_without_credentials():
    shown = outward.masked_model_args(
        {"headers": {"X-Api-Key": "v"}, "api_key": "k", "api_key_env": "VAR", "seed": 1}
    )
    masked = {"headers": {"X-Api-Key": "***"}, "api_key": "***"}
    assert shown == {**masked, "api_key_env": "VAR", "seed": 1}


# -- cuts --------------------------------------------------------------------------------------


@given(
    before=st.text(string.printable, max_size=400),
    after=st.text(string.printable, max_size=400),
    limit=st.integers(1, 500),
)
def test_no_cut_leaves_the_start_of_a_key(before, after, limit):
    outward.register_secret(KEY, "$GATEWAY_ACCESS")
    text = before + KEY + after
    for shown in (outward.clip(text, limit), outward.head(text, limit)):
        assert KEY[:6] not in shown.replace("[redacted $GATEWAY_ACCESS]", "")


# -- endpoints that echo ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("offset", [0, 290, 295])
def test_a_401_echoing_the_key_of_any_variable_is_redacted(
    provider, offset, sample_dataset, monkeypatch
):
    """The key of ``api_key_env=GATEWAY_ACCESS`` (a name no list holds), at the cut too."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GATEWAY_ACCESS", KEY)

    def echo(record) -> Step:
        sent = {k.lower(): v for k, v in record.headers.items()}
        credential = sent.get("authorization") or sent.get("x-api-key") or ""
        message = "x" * offset + f" you sent {credential} " + "y" * 400
        return Step({"error": {"message": message}}, status=401)

    with ScriptedServer(models=["x"], default=echo) as server:
        base = server.url if provider == "openai" else server.base
        generation = GenerationSettings(base_url=base, model_args={"api_key_env": "GATEWAY_ACCESS"})
        context = ModelContext(sample_dataset, ("e2e",), sample_dataset.root, generation=generation)
        model = make_model(f"{provider}/x", context)
        with pytest.raises(GtaInfrastructureError) as info:
            model.generate(REQUEST)
        (request,) = server.requests
    assert KEY in str(request.headers), "the key was sent"
    message = str(info.value)
    assert "HTTP 401" in message
    assert KEY[:6] not in message, message
    if offset == 0:
        assert "[redacted $GATEWAY_ACCESS]" in message
