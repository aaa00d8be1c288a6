"""``run_gateway.py deploy``: the SageMaker endpoint and its auto-scaling, in five requests.

1. ``sagemaker.create_model`` (the container image, its environment and execution role),
2. ``sagemaker.create_endpoint_config`` (one variant, ``ml.g5.xlarge`` by default),
3. ``sagemaker.create_endpoint`` (then wait until it is InService),
4. ``application-autoscaling.register_scalable_target`` (the variant's instance count),
5. ``application-autoscaling.put_scaling_policy`` (target tracking: the load test's policy
   JSON, or ``ConcurrentRequestsPerModel`` at ``--target``).

``--dry-run`` prints every request and validates each against botocore's own service model
(``botocore.validate.validate_parameters`` on the operation's input shape, plus the enums that
botocore leaves to the service), with no network and no credentials. The policy uses the
high-resolution predefined metric ``SageMakerVariantConcurrentRequestsPerModelHighResolution``
(reported every 10 s) where the installed botocore knows it, else the same CloudWatch metric
as a customized metric specification.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

log = logging.getLogger(__name__)

DEFAULT_INSTANCE = "ml.g5.xlarge"
VARIANT = "AllTraffic"
CONCURRENCY_METRIC = "SageMakerVariantConcurrentRequestsPerModelHighResolution"
INVOCATIONS_METRIC = "SageMakerVariantInvocationsPerInstance"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"


class InvalidRequest(ValueError):
    """A request that botocore's service model rejects."""


@dataclass(frozen=True, slots=True)
class Request:
    service: str  # "sagemaker" or "application-autoscaling"
    operation: str  # the API name, e.g. "CreateModel"
    params: dict[str, Any]

    @property
    def method(self) -> str:
        """The boto3 client method (``CreateModel`` -> ``create_model``)."""
        from botocore import xform_name

        return str(xform_name(self.operation))


def _service_model(service: str) -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model(service)


def known_metric(name: str) -> bool:
    """Whether the installed botocore lists ``name`` as a predefined scaling metric."""
    try:
        enum = _service_model("application-autoscaling").shape_for("MetricType").enum
    except Exception:  # no botocore, or a model without the shape: fall back to customized
        return False
    return name in enum


def target_tracking(
    target: float, *, metric: str = CONCURRENCY_METRIC, scale_in_cooldown: int = 300, scale_out_cooldown: int = 60
) -> dict[str, Any]:
    """A TargetTrackingScalingPolicyConfiguration, as the load test writes it and AWS CLI takes it."""
    config: dict[str, Any] = {"TargetValue": float(target)}
    if metric != CONCURRENCY_METRIC or known_metric(metric):
        config["PredefinedMetricSpecification"] = {"PredefinedMetricType": metric}
    else:  # the same CloudWatch metric; deploy fills in the endpoint and variant dimensions
        config["CustomizedMetricSpecification"] = {
            "MetricName": "ConcurrentRequestsPerModel",
            "Namespace": "AWS/SageMaker",
            "Statistic": "Average",
        }
    config["ScaleInCooldown"], config["ScaleOutCooldown"] = scale_in_cooldown, scale_out_cooldown
    return config


def load_policy(path: str | Path, endpoint: str, variant: str = VARIANT) -> dict[str, Any]:
    """A policy file: a bare target-tracking configuration or one under its API key."""
    body = json.loads(Path(path).read_text())
    if not isinstance(body, dict):
        raise InvalidRequest(f"{path}: a policy file holds a JSON object")
    return with_dimensions(dict(body.get("TargetTrackingScalingPolicyConfiguration", body)), endpoint, variant)


def with_dimensions(config: dict[str, Any], endpoint: str, variant: str = VARIANT) -> dict[str, Any]:
    """A customized metric without dimensions gets this endpoint's and variant's."""
    custom = config.get("CustomizedMetricSpecification")
    if isinstance(custom, dict) and "Dimensions" not in custom and "Metrics" not in custom:
        config = {
            **config,
            "CustomizedMetricSpecification": {
                **custom,
                "Dimensions": [{"Name": "EndpointName", "Value": endpoint}, {"Name": "VariantName", "Value": variant}],
            },
        }
    return config


def build_requests(args: argparse.Namespace, stamp: str) -> list[Request]:
    model, config_name = f"{args.name}-{stamp}", f"{args.name}-config-{stamp}"
    env = dict(item.split("=", 1) for item in args.env)
    resource = f"endpoint/{args.name}/variant/{VARIANT}"
    policy = (
        load_policy(args.policy, args.name) if args.policy else with_dimensions(target_tracking(args.target), args.name)
    )
    scaling = {"ServiceNamespace": "sagemaker", "ResourceId": resource, "ScalableDimension": DIMENSION}
    return [
        Request(
            "sagemaker",
            "CreateModel",
            {
                "ModelName": model,
                "ExecutionRoleArn": args.role,
                "PrimaryContainer": {"Image": args.image, "Environment": env, "Mode": "SingleModel"},
            },
        ),
        Request(
            "sagemaker",
            "CreateEndpointConfig",
            {
                "EndpointConfigName": config_name,
                "ProductionVariants": [
                    {
                        "VariantName": VARIANT,
                        "ModelName": model,
                        "InstanceType": args.instance_type,
                        "InitialInstanceCount": args.instance_count,
                        "ContainerStartupHealthCheckTimeoutInSeconds": args.startup_timeout,
                    }
                ],
            },
        ),
        Request("sagemaker", "CreateEndpoint", {"EndpointName": args.name, "EndpointConfigName": config_name}),
        Request(
            "application-autoscaling",
            "RegisterScalableTarget",
            {**scaling, "MinCapacity": args.min_capacity, "MaxCapacity": args.max_capacity},
        ),
        Request(
            "application-autoscaling",
            "PutScalingPolicy",
            {
                **scaling,
                "PolicyName": f"{args.name}-target-tracking",
                "PolicyType": "TargetTrackingScaling",
                "TargetTrackingScalingPolicyConfiguration": policy,
            },
        ),
    ]


def validate(request: Request) -> None:
    """Raise ``InvalidRequest`` unless botocore's model of the operation accepts the request."""
    from botocore.exceptions import ParamValidationError
    from botocore.validate import validate_parameters

    shape = _service_model(request.service).operation_model(request.operation).input_shape
    problems = []
    try:
        validate_parameters(request.params, shape)
    except ParamValidationError as exc:
        problems.append(" ".join(str(exc).split()))
    problems += _enum_problems(request.params, shape, request.operation)
    if problems:
        raise InvalidRequest(f"{request.service}.{request.method}: " + "; ".join(problems))


def _enum_problems(value: Any, shape: Any, where: str) -> list[str]:
    """botocore validates types, required members and ranges but leaves enums to the service."""
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        return [
            p
            for key, item in value.items()
            if key in shape.members
            for p in _enum_problems(item, shape.members[key], f"{where}.{key}")
        ]
    if kind == "list" and isinstance(value, list):
        return [p for n, item in enumerate(value) for p in _enum_problems(item, shape.member, f"{where}[{n}]")]
    if kind == "map" and isinstance(value, dict):
        return [p for key, item in value.items() for p in _enum_problems(item, shape.value, f"{where}.{key}")]
    enum = getattr(shape, "enum", None)
    if kind == "string" and enum and isinstance(value, str) and value not in enum:
        return [f"{where}: {value!r} is not one of the {len(enum)} values botocore knows"]
    return []


def execute(requests: list[Request], region: str | None) -> None:
    """Send the requests for real; the endpoint must be InService before it can be scaled."""
    import boto3

    clients = {name: boto3.client(name, region_name=region) for name in {r.service for r in requests}}
    for request in requests:
        log.info("%s.%s", request.service, request.method)
        getattr(clients[request.service], request.method)(**request.params)
        if request.operation == "CreateEndpoint":
            log.info("waiting for endpoint %s to be InService (several minutes)", request.params["EndpointName"])
            clients["sagemaker"].get_waiter("endpoint_in_service").wait(EndpointName=request.params["EndpointName"])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run_gateway.py deploy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--image", required=True, help="the container image URI (carries the bidirectional label)")
    p.add_argument("--role", required=True, help="the SageMaker execution role ARN")
    p.add_argument("--name", default="kokoro-tts", help="endpoint name (model and config get a time stamp)")
    p.add_argument("--instance-type", default=DEFAULT_INSTANCE)
    p.add_argument("--instance-count", type=int, default=1)
    p.add_argument("--min-capacity", type=int, default=1)
    p.add_argument("--max-capacity", type=int, default=4)
    p.add_argument("--policy", help="target-tracking policy JSON from `loadtest` (policy.json)")
    p.add_argument(
        "--target",
        type=float,
        default=4.0,
        help="ConcurrentRequestsPerModel target when no --policy is given (measure it with loadtest)",
    )
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="container environment")
    p.add_argument("--startup-timeout", type=int, default=600, help="seconds for /ping to answer after start")
    p.add_argument("--region")
    p.add_argument("--dry-run", action="store_true", help="print and validate the requests; send nothing")
    return p


def main(argv: list[str], out: TextIO | None = None) -> int:
    out = out or sys.stdout
    argv = argv[1:] if argv[:1] == ["--"] else argv  # `run_gateway.py deploy -- --dry-run ...`
    args = build_parser().parse_args(argv)
    bad_env = [item for item in args.env if "=" not in item]
    if bad_env:
        raise SystemExit(f"--env expects NAME=VALUE, got {bad_env[0]!r}")
    if not 0 <= args.min_capacity <= args.max_capacity:  # the service model sets no bounds here
        raise SystemExit(f"need 0 <= --min-capacity <= --max-capacity, got {args.min_capacity} and {args.max_capacity}")
    requests = build_requests(args, time.strftime("%Y%m%d%H%M%S", time.gmtime()))
    failed = 0
    for request in requests:
        try:
            validate(request)
            status = "valid"
        except InvalidRequest as exc:
            failed += 1
            status = f"INVALID: {exc}"
        if args.dry_run:
            out.write(f"# {request.service}.{request.method}: {status}\n{json.dumps(request.params, indent=2)}\n")
        elif failed:
            log.error("%s", status)
    if failed:
        log.error("%d of %d requests fail botocore's validation; nothing was sent", failed, len(requests))
        return 2
    if not args.dry_run:
        execute(requests, args.region)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
