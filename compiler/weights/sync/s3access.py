"""A store in an S3 bucket: ``s3://bucket/prefix`` URLs, credentials and request signing.

Credentials come from botocore's provider chain, the one the AWS CLI and SDKs use: the
environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), a
profile (``AWS_PROFILE``, ``AWS_CONFIG_FILE``, ``AWS_SHARED_CREDENTIALS_FILE``), web identity
(``AWS_ROLE_ARN`` and ``AWS_WEB_IDENTITY_TOKEN_FILE``, which EKS's IRSA webhook sets; botocore
calls STS AssumeRoleWithWebIdentity and refreshes before expiry), container and instance
credentials. botocore (imported only for an ``s3://`` store) signs each request
(SigV4), and the project's own fetcher (``fetch.py``) sends it, so Range resume, the rate
limit, retries, deadlines and verification are the same as for HTTP.

The endpoint is ``--endpoint-url``, else ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``
(as the AWS SDKs read them), else AWS's own for the region. A custom endpoint (MinIO,
versitygw, Ceph RGW, R2) is addressed path-style: ``<endpoint>/<bucket>/<key>``.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

import botocore.session
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError, ClientError

from compiler.urls import S3Url, http_url
from compiler.weights.sync.errors import StoreDenied, StoreError

DEFAULT_REGION = "us-east-1"
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def endpoint(explicit: str | None) -> str | None:
    """The endpoint to use: the flag's, else the SDKs' environment variables'."""
    value = explicit or next((os.environ[v] for v in ENDPOINT_ENV if os.environ.get(v)), None)
    if value is None:
        return None
    try:
        http_url(value)
    except ValueError as exc:
        raise StoreError(f"--endpoint-url: {exc}") from None
    return value.rstrip("/")


@dataclass
class S3Access:
    """Where a store's bucket is, and the credentials that open it."""

    url: S3Url
    endpoint: str | None
    region: str
    session: Any  # botocore.session.Session
    credentials: Any  # botocore.credentials.Credentials, or None: unsigned requests

    @property
    def http_base(self) -> str:
        """The store's base URL, for the fetcher."""
        quoted = urllib.parse.quote(self.url.prefix)
        if self.endpoint is not None:
            return f"{self.endpoint}/{self.url.bucket}/{quoted}"
        if "." in self.url.bucket:  # a virtual host would not match AWS's certificate
            return f"https://s3.{self.region}.amazonaws.com/{self.url.bucket}/{quoted}"
        return f"https://{self.url.bucket}.s3.{self.region}.amazonaws.com/{quoted}"

    @property
    def method(self) -> str:
        """Where the credentials came from (botocore's name: env, shared-credentials-file,
        assume-role-with-web-identity, ...), or 'none'."""
        return str(getattr(self.credentials, "method", None) or "none")

    def sign(self, method: str, url: str, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` plus SigV4's (Authorization, X-Amz-Date, X-Amz-Content-SHA256 and
        a session token), for one request; unchanged without credentials."""
        if self.credentials is None:
            return headers
        frozen = self._frozen()
        request = AWSRequest(method=method, url=url, headers=dict(headers))
        S3SigV4Auth(frozen, "s3", self.region).add_auth(request)
        return dict(request.headers.items())

    def _frozen(self) -> Any:
        """The current keys: a web identity's are refreshed from STS before they expire."""
        try:
            return self.credentials.get_frozen_credentials()
        except (BotoCoreError, ClientError) as exc:
            raise StoreDenied(f"{self.url}: the {self.method} credentials: {exc}") from None

    def refused(self, status: int, body: bytes) -> StoreDenied | None:
        """The error for an answer that is the credentials' or the bucket's fault: a 401
        or 403; a 301 or 400 (a bucket in another region: PermanentRedirect,
        AuthorizationHeaderMalformed); a 404 that is not a missing key (NoSuchBucket;
        versitygw answers an unknown access key with 404 XAdminUserNotFound)."""
        code = _tag(body, "Code")
        if status in (401, 403) or (status in (301, 400, 404) and code not in ("", "NoSuchKey")):
            return self.denied(status, body)
        return None

    def denied(self, status: int, body: bytes) -> StoreDenied:
        """The error for a 401/403 answer: what the store said, and which credentials."""
        code = _tag(body, "Code") or f"HTTP {status}"
        message = _tag(body, "Message")
        said = f"{code}: {message}" if message else code
        if self.credentials is None:
            how = (
                "no credentials were found (not in the environment, a profile or a web "
                "identity), so the request was unsigned"
            )
        else:
            how = f"with the credentials from {self.method}"
        hint = ""
        if code in ("PermanentRedirect", "AuthorizationHeaderMalformed"):
            hint = f"; the bucket is not in {self.region}: set AWS_REGION to its region"
        return StoreDenied(f"{self.url}: the store refused the request {how} ({said}){hint}")


def _tag(body: bytes, name: str) -> str:
    """The text of an S3 error document's ``<name>`` element ('' if none), trimmed."""
    found = re.search(rb"<%s>([^<]{0,512})</%s>" % (name.encode(), name.encode()), body)
    return found.group(1).decode("utf-8", "replace").strip() if found else ""


def access(url: str, *, endpoint_url: str | None = None, profile: str | None = None) -> S3Access:
    """The bucket of ``url`` and the credentials the environment provides for it."""
    try:
        where = S3Url.parse(url)
    except ValueError as exc:
        raise StoreError(str(exc)) from None
    ep = endpoint(endpoint_url)
    try:
        session = botocore.session.Session(profile=profile)
        region = str(session.get_config_variable("region") or DEFAULT_REGION)
        credentials = session.get_credentials()
    except (BotoCoreError, ClientError) as exc:
        raise StoreDenied(f"{where}: no usable credentials: {exc}") from None
    return S3Access(where, ep, region, session, credentials)
