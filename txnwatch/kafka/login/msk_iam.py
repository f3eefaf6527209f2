"""AWS MSK IAM tokens: presigned requests made by AWS's own signer (PyPI
aws-msk-iam-sasl-signer-python, `pip install 'txnwatch[msk]'`) from the default credential chain,
a named profile or an assumed role. Not tested against MSK itself (none runs here): the unit tests
pin how the signer is called and what becomes of its answers."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from .settings import MskIamSettings
from .tokens import LoginFailure, Token

PRINCIPAL = "aws-msk-iam"      # what librdkafka logs as the token's principal (MSK maps the IAM identity)


def signer_module() -> ModuleType:
    """AWS's signer; ImportError names the extra that installs it."""
    try:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    except ImportError:
        raise ImportError("sasl.oauthbearer.method aws_msk_iam needs AWS's signer: pip install "
                          "'txnwatch[msk]' (aws-msk-iam-sasl-signer-python)") from None
    return MSKAuthTokenProvider


def token_source(settings: MskIamSettings, signer: ModuleType) -> Callable[[float], Token]:
    """fetch(now) -> Token, signed for the settings' region and identity."""
    def fetch(now: float) -> Token:
        try:
            if settings.role_arn:
                token, expiry_ms = signer.generate_auth_token_from_role_arn(settings.region, settings.role_arn)
            elif settings.profile:
                token, expiry_ms = signer.generate_auth_token_from_profile(settings.region, settings.profile)
            else:
                token, expiry_ms = signer.generate_auth_token(settings.region)
        except Exception as exc:  # noqa: BLE001 - botocore's many credential and network errors
            raise LoginFailure(f"AWS MSK IAM signer ({settings.region}) failed: {type(exc).__name__}: "
                               f"{str(exc)[:200]}; check the AWS credentials the exporter runs with "
                               "(environment, profile, role, instance or pod identity)") from None
        return Token(str(token), float(expiry_ms) / 1000.0, now, PRINCIPAL)
    return fetch
