"""``deploy --dry-run``: every request validates against botocore's service model, offline,
and a deliberately wrong parameter fails that validation."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("botocore")

from gateway.ops.deploy import (
    CONCURRENCY_METRIC,
    InvalidRequest,
    Request,
    load_policy,
    main,
    target_tracking,
    validate,
)

BASE = [
    "--dry-run",
    "--image",
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts:1",
    "--role",
    "arn:aws:iam::123456789012:role/SageMakerExecution",
    "--name",
    "tts-test",
]


def dry_run(*extra: str) -> tuple[int, str, dict[str, str]]:
    out = io.StringIO()
    rc = main([*BASE, *extra], out=out)
    text = out.getvalue()
    status = dict(re.findall(r"^# (\S+): (.*)$", text, flags=re.M))
    return rc, text, status


def test_dry_run_validates_every_request(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(target_tracking(6)))  # what the load test writes
    rc, text, status = dry_run("--policy", str(policy), "--env", "GATEWAY_ENGINE=kokoro")
    assert rc == 0
    assert list(status) == [
        "sagemaker.create_model",
        "sagemaker.create_endpoint_config",
        "sagemaker.create_endpoint",
        "application-autoscaling.register_scalable_target",
        "application-autoscaling.put_scaling_policy",
    ]
    assert set(status.values()) == {"valid"}
    assert '"InstanceType": "ml.g5.xlarge"' in text
    assert '"ResourceId": "endpoint/tts-test/variant/AllTraffic"' in text
    assert f'"PredefinedMetricType": "{CONCURRENCY_METRIC}"' in text and '"TargetValue": 6.0' in text
    assert '"GATEWAY_ENGINE": "kokoro"' in text


@pytest.mark.parametrize(
    ("args", "bad"),
    [
        (["--instance-count", "0"], "sagemaker.create_endpoint_config"),  # below the model's minimum of 1
        (["--instance-type", "ml.g5.enormous"], "sagemaker.create_endpoint_config"),  # not in the enum
        (["--startup-timeout", "5"], "sagemaker.create_endpoint_config"),  # the model's range is 60..3600 s
    ],
)
def test_a_wrong_parameter_fails_validation(args: list[str], bad: str) -> None:
    rc, _, status = dry_run(*args)
    assert rc == 2
    assert status[bad].startswith("INVALID")
    assert [k for k, v in status.items() if v != "valid"] == [bad]


def test_capacities_are_checked_before_any_request() -> None:
    with pytest.raises(SystemExit, match="min-capacity"):
        dry_run("--min-capacity", "3", "--max-capacity", "2")


def test_a_wrong_policy_file_fails_validation(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps(
            {
                "TargetValue": "high",
                "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantNoSuchMetric"},
            }
        )
    )
    rc, text, status = dry_run("--policy", str(policy))
    assert rc == 2
    assert status["application-autoscaling.put_scaling_policy"].startswith("INVALID")
    assert (
        "TargetValue" in text and "SageMakerVariantNoSuchMetric" in status["application-autoscaling.put_scaling_policy"]
    )


def test_validate_names_an_unknown_member() -> None:
    with pytest.raises(InvalidRequest, match="EndpointNme"):
        validate(Request("sagemaker", "CreateEndpoint", {"EndpointNme": "x", "EndpointConfigName": "y"}))


def test_a_customized_metric_gets_the_endpoint_dimensions(tmp_path: Path) -> None:
    policy = tmp_path / "custom.json"
    policy.write_text(
        json.dumps(
            {
                "TargetValue": 3.0,
                "CustomizedMetricSpecification": {
                    "MetricName": "ConcurrentRequestsPerModel",
                    "Namespace": "AWS/SageMaker",
                    "Statistic": "Average",
                },
            }
        )
    )
    config = load_policy(policy, "tts-test")
    assert config["CustomizedMetricSpecification"]["Dimensions"] == [
        {"Name": "EndpointName", "Value": "tts-test"},
        {"Name": "VariantName", "Value": "AllTraffic"},
    ]
    rc, _, status = dry_run("--policy", str(policy))
    assert rc == 0 and set(status.values()) == {"valid"}
