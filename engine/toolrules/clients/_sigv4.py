"""AWS Signature Version 4 for providers whose rule says `auth.kind: aws-sigv4`.

Signing is botocore's (an optional extra): credentials come from its usual chain
(environment, shared files, SSO, instance roles). Without botocore the error names the
extra that installs it.
"""

from __future__ import annotations

from typing import Any

from ..calls._tool_errors import ToolErrorCode
from ._errors import ProviderError
from ._retry import RetryPolicy

__all__ = ["Signer"]


class Signer:
    """Signs requests for one service and region with the default credential chain."""

    def __init__(self, service: str, region: str, extra: str | None, provider: str,
                 policy: RetryPolicy):
        self.service = service
        self.region = region
        self.extra = extra
        self.provider = provider
        self.policy = policy
        self._credentials: Any = None

    def __repr__(self) -> str:
        return f"<Signer {self.service} {self.region}>"

    def _fail(self, message: str) -> ProviderError:
        return ProviderError(self.policy.error(message, code=ToolErrorCode.AUTH),
                             provider=self.provider)

    def load(self) -> None:
        """Find credentials (may touch the network for instance roles: call off-loop)."""
        if self._credentials is not None:
            return
        try:
            from botocore.session import Session
        except ImportError:
            extra = f"toolrules[{self.extra}]" if self.extra else "botocore"
            raise self._fail(f"signing requests for provider {self.provider!r} needs botocore: "
                             f"pip install '{extra}' (or pass api_key= with an API key)") from None
        creds = Session().get_credentials()
        if creds is None:
            raise self._fail("no AWS credentials found (AWS_ACCESS_KEY_ID / "
                             "AWS_SECRET_ACCESS_KEY, a profile, or a role); or pass api_key=")
        self._credentials = creds

    def sign(self, method: str, url: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
        """The headers to send: `headers` plus the signature's."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        self.load()
        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
        SigV4Auth(self._credentials.get_frozen_credentials(), self.service,
                  self.region).add_auth(request)
        return {k: str(v) for k, v in request.headers.items()}
